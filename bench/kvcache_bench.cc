// Micro-benchmarks of the KV cache bookkeeping (kvcache/). Run:
//   build-kvcache/bench/kvcache_bench
// Counters: heap_allocs_per_block counts global operator new calls inside the timed loop,
// divided by the blocks handled (steady state must be 0); bookkeeping_bytes_per_block is the
// block record + free-queue links + index slot; token_bytes_per_block is the stored token ids.

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <new>
#include <numeric>
#include <vector>

#include "kvcache/block_hash.h"
#include "kvcache/kv_cache_manager.h"

// Replacing the global operator new/delete pair with malloc/free is well-defined; GCC's
// -Wmismatched-new-delete cannot see that the pair is replaced together.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {

int64_t g_heap_allocations = 0;

}  // namespace

void* operator new(size_t size) {
  ++g_heap_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace kvserve {
namespace {

constexpr int kBlockSize = 16;

std::unique_ptr<KvCacheManager> MakeManager(int num_blocks) {
  return *KvCacheManager::Create(
      KvCacheConfig{.num_blocks = num_blocks, .block_size = kBlockSize, .epoch = 1});
}

std::vector<TokenId> Prompt(int num_tokens, TokenId first) {
  std::vector<TokenId> tokens(num_tokens);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

void ReportBlocks(benchmark::State& state, int64_t allocations, int blocks_per_iteration,
                  const KvCacheManager& manager) {
  const double blocks = static_cast<double>(state.iterations()) * blocks_per_iteration;
  state.counters["heap_allocs_per_block"] = static_cast<double>(allocations) / blocks;
  state.counters["blocks_per_s"] = benchmark::Counter(blocks, benchmark::Counter::kIsRate);
  state.counters["bookkeeping_bytes_per_block"] = manager.pool().BookkeepingBytesPerBlock();
  state.counters["token_bytes_per_block"] = kBlockSize * sizeof(TokenId);
}

// Admit a 1k-token prompt (64 blocks reserved) and free it: the pure bookkeeping cost.
void BM_AllocateFreeSequence(benchmark::State& state) {
  const int num_tokens = static_cast<int>(state.range(0));
  auto manager = MakeManager(4096);
  const std::vector<TokenId> prompt = Prompt(num_tokens, 0);
  // Warm up once: the first admission grows the sequence's buffers.
  (void)manager->AddSequence(1, prompt, "", num_tokens);
  (void)manager->FreeSequence(1);
  const int64_t before = g_heap_allocations;
  for (auto _ : state) {
    benchmark::DoNotOptimize(manager->AddSequence(1, prompt, "", num_tokens));
    benchmark::DoNotOptimize(manager->FreeSequence(1));
  }
  ReportBlocks(state, g_heap_allocations - before, num_tokens / kBlockSize, *manager);
}
BENCHMARK(BM_AllocateFreeSequence)->Arg(1024);

// Admit, compute (hash and cache all 64 blocks) and free a 1k-token prompt that differs every
// iteration, so that the pool is full of evictable prefixes and every allocation evicts.
void BM_PrefillCommitFreeSequence(benchmark::State& state) {
  const int num_tokens = static_cast<int>(state.range(0));
  auto manager = MakeManager(1024);
  std::vector<TokenId> prompt = Prompt(num_tokens, 0);
  KvEventBatch events;
  events.events.reserve(4 * num_tokens);
  // Warm up: fill the pool with evictable cached blocks, grow every buffer once.
  for (int i = 0; i < 64; ++i) {
    prompt[0] = -1 - i;
    (void)manager->AddSequence(1, prompt, "", num_tokens);
    (void)manager->CommitComputed(1, num_tokens);
    (void)manager->FreeSequence(1);
    manager->DrainEvents(&events);
  }
  int64_t iteration = 0;
  const int64_t before = g_heap_allocations;
  for (auto _ : state) {
    prompt[0] = static_cast<TokenId>(++iteration);
    benchmark::DoNotOptimize(manager->AddSequence(1, prompt, "", num_tokens));
    benchmark::DoNotOptimize(manager->CommitComputed(1, num_tokens));
    benchmark::DoNotOptimize(manager->FreeSequence(1));
    manager->DrainEvents(&events);
  }
  ReportBlocks(state, g_heap_allocations - before, num_tokens / kBlockSize, *manager);
}
BENCHMARK(BM_PrefillCommitFreeSequence)->Arg(1024);

// Prefix lookup of a 4k-token prompt whose 256 full blocks are all cached (the 4097th token is
// the one a prompt always computes).
void BM_PrefixLookup(benchmark::State& state) {
  const int num_blocks = static_cast<int>(state.range(0));
  auto manager = MakeManager(4096);
  const std::vector<TokenId> prompt = Prompt(num_blocks * kBlockSize + 1, 1000);
  (void)manager->AddSequence(1, prompt, "tenant", static_cast<int>(prompt.size()));
  (void)manager->CommitComputed(1, static_cast<int>(prompt.size()));
  (void)manager->FreeSequence(1);  // cached, evictable: the common case for a new request
  if (manager->FindCachedPrefix(prompt, "tenant").num_blocks != num_blocks) {
    state.SkipWithError("cache not warm");
    return;
  }
  const int64_t before = g_heap_allocations;
  for (auto _ : state) {
    benchmark::DoNotOptimize(manager->FindCachedPrefix(prompt, "tenant"));
  }
  ReportBlocks(state, g_heap_allocations - before, num_blocks, *manager);
}
BENCHMARK(BM_PrefixLookup)->Arg(256);

// Admitting a request whose 256-block prefix is cached: lookup + attach + free.
void BM_AddSequenceWithCachedPrefix(benchmark::State& state) {
  const int num_blocks = static_cast<int>(state.range(0));
  auto manager = MakeManager(4096);
  const std::vector<TokenId> prompt = Prompt(num_blocks * kBlockSize + 1, 1000);
  (void)manager->AddSequence(1, prompt, "", static_cast<int>(prompt.size()));
  (void)manager->CommitComputed(1, static_cast<int>(prompt.size()));
  (void)manager->FreeSequence(1);
  const int64_t before = g_heap_allocations;
  for (auto _ : state) {
    benchmark::DoNotOptimize(manager->AddSequence(2, prompt, "", 1));
    benchmark::DoNotOptimize(manager->FreeSequence(2));
  }
  ReportBlocks(state, g_heap_allocations - before, num_blocks, *manager);
}
BENCHMARK(BM_AddSequenceWithCachedPrefix)->Arg(256);

// One decode step's bookkeeping for 256 running sequences: append, reserve, map, commit.
void BM_DecodeStep(benchmark::State& state) {
  constexpr int kPromptTokens = 512;
  const int num_sequences = static_cast<int>(state.range(0));
  auto manager = MakeManager(num_sequences * 80);
  KvEventBatch events;
  int64_t slot = 0;
  // Every 512 steps the sequences restart, so that they stay inside their share of the pool.
  auto restart = [&] {
    for (int s = 0; s < num_sequences; ++s) {
      (void)manager->FreeSequence(s);
      const std::vector<TokenId> prompt = Prompt(kPromptTokens, s * 1000);
      (void)manager->AddSequence(s, prompt, "", kPromptTokens);
      (void)manager->CommitComputed(s, kPromptTokens);
    }
  };
  auto step = [&] {
    for (int s = 0; s < num_sequences; ++s) {
      const TokenId token = 7;
      (void)manager->AppendTokens(s, {&token, 1});
      (void)manager->AllocateSlots(s, 1);
      (void)manager->GetSlotMapping(s, *manager->GetNumComputedTokens(s), {&slot, 1});
      (void)manager->CommitComputed(s, 1);
    }
    manager->DrainEvents(&events);
  };
  // Warm up one full cycle so that every buffer has reached its steady-state capacity.
  restart();
  for (int i = 0; i < kPromptTokens; ++i) step();
  restart();
  manager->DrainEvents(&events);
  int steps = 0;
  int64_t paused_allocations = 0;
  const int64_t before = g_heap_allocations;
  for (auto _ : state) {
    if (++steps == kPromptTokens) {
      state.PauseTiming();
      const int64_t paused_from = g_heap_allocations;
      restart();
      steps = 0;
      paused_allocations += g_heap_allocations - paused_from;
      state.ResumeTiming();
    }
    step();
    benchmark::DoNotOptimize(slot);
  }
  state.counters["sequences_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * num_sequences, benchmark::Counter::kIsRate);
  state.counters["heap_allocs_per_step"] =
      static_cast<double>(g_heap_allocations - before - paused_allocations) / state.iterations();
}
BENCHMARK(BM_DecodeStep)->Arg(256);

void BM_HashBlock(benchmark::State& state) {
  const std::vector<TokenId> tokens = Prompt(kBlockSize, 5);
  BlockHash hash;
  for (auto _ : state) {
    hash = HashBlock(hash, tokens, "");
    benchmark::DoNotOptimize(hash);
  }
}
BENCHMARK(BM_HashBlock);

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
