// Forward-pass throughput of the default model (SmolLM2-135M, fp32 weights dequantized from
// Q4_1) on the CPU backend over the paged KV cache (block size 16):
//   BM_Prefill/128           one 128-token prompt as one step: prompt tokens/s
//   BM_Decode/B              one decode step for B sequences at context 128: tokens/s
//   BM_NextToken_Cached/1000 the next token after a 1,000-token context, K/V cached
//   BM_NextToken_Recompute/1000  the same token by recomputing the whole 1,001-token prefix
// The last two are the KV cache's reason to exist; their time ratio is the speed-up.
// $KVSERVE_MODEL or the cached default model; a missing model skips with an error.
//
//   build-fwd/bench/model_bench --benchmark_min_time=2
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/default_model.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"
#include "model/weights_loader.h"

namespace kvserve {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kMaxTokens = 1024 + 16;
constexpr int32_t kMaxSeqs = 32;
constexpr int32_t kBlocksPerSeq = (kMaxTokens + kBlockSize - 1) / kBlockSize;

// Weights, model and pool shared by every benchmark (loading takes seconds).
struct Fixture {
  ModelWeights weights;
  kernels::cpu::CpuBackend backend{0};
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<HostKvPool> pool;
  std::string error;
};

Fixture& Shared() {
  static Fixture* fixture = [] {
    auto* f = new Fixture;
    auto weights = LoadWeights(DefaultModelPath());
    if (!weights.ok()) {
      f->error = std::string(weights.status().message()) + " (run scripts/setup.sh)";
      return f;
    }
    f->weights = std::move(weights).value();
    ForwardLimits limits{.max_num_tokens = kMaxTokens,
                         .max_num_seqs = kMaxSeqs,
                         .max_context_len = kMaxTokens,
                         .max_logit_rows = kMaxSeqs};
    f->model = LlamaModel::Create(&f->weights, &f->backend, limits, kBlockSize).value();
    // Sequence s owns blocks [1 + s * kBlocksPerSeq, 1 + (s + 1) * kBlocksPerSeq).
    f->pool = HostKvPool::Create(f->model->kv_layout(), 1 + kMaxSeqs * kBlocksPerSeq).value();
    return f;
  }();
  return *fixture;
}

std::vector<int32_t> BlockTable(int32_t seq, int32_t num_tokens) {
  std::vector<int32_t> table((num_tokens + kBlockSize - 1) / kBlockSize);
  std::iota(table.begin(), table.end(), 1 + seq * kBlocksPerSeq);
  return table;
}

std::vector<int32_t> RandomTokens(int32_t count, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> tokens(count);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

// Prefills `prompt` of sequence `seq` in one step; logits of the last token only.
bool Prefill(Fixture& f, ForwardBatchBuilder& builder, int32_t seq,
             const std::vector<int32_t>& prompt, benchmark::State& state) {
  builder.Clear();
  const std::vector<int32_t> table = BlockTable(seq, static_cast<int32_t>(prompt.size()));
  if (!builder.AddSequence(prompt, 0, table, LogitsFor::kLast).ok()) return false;
  auto logits = f.model->Forward(builder.View(), *f.pool);
  if (!logits.ok()) state.SkipWithError(std::string(logits.status().message()).c_str());
  return logits.ok();
}

void BM_Prefill(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t len = static_cast<int32_t>(state.range(0));
  const std::vector<int32_t> prompt = RandomTokens(len, f.weights.config.vocab_size, 1);
  ForwardBatchBuilder builder(kBlockSize, kBlocksPerSeq, kMaxTokens, kMaxSeqs);
  for (auto _ : state) {
    if (!Prefill(f, builder, 0, prompt, state)) break;
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(len), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Prefill)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode step of `batch` sequences, each with a 128-token context (the step rewrites the
// same slot every iteration, so the context stays 129).
void BM_Decode(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t batch = static_cast<int32_t>(state.range(0));
  constexpr int32_t kContext = 128;
  ForwardBatchBuilder builder(kBlockSize, kBlocksPerSeq, kMaxTokens, kMaxSeqs);
  std::vector<std::vector<int32_t>> tables;
  for (int32_t s = 0; s < batch; ++s) {
    if (!Prefill(f, builder, s, RandomTokens(kContext, f.weights.config.vocab_size, 10 + s), state))
      return;
    tables.push_back(BlockTable(s, kContext + 1));
  }
  builder.Clear();
  const int32_t next = 42;
  for (int32_t s = 0; s < batch; ++s) {
    if (!builder.AddSequence({&next, 1}, kContext, tables[s], LogitsFor::kLast).ok()) {
      return state.SkipWithError("batch does not fit");
    }
  }
  const ForwardBatch step = builder.View();
  for (auto _ : state) {
    auto logits = f.model->Forward(step, *f.pool);
    if (!logits.ok()) return state.SkipWithError(std::string(logits.status().message()).c_str());
    benchmark::DoNotOptimize(logits->data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();

// The next token after a context of range(0) tokens, with the context's K/V in the cache.
void BM_NextToken_Cached(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t context = static_cast<int32_t>(state.range(0));
  const std::vector<int32_t> tokens = RandomTokens(context + 1, f.weights.config.vocab_size, 7);
  ForwardBatchBuilder builder(kBlockSize, kBlocksPerSeq, kMaxTokens, kMaxSeqs);
  if (!Prefill(f, builder, 0, std::vector<int32_t>(tokens.begin(), tokens.end() - 1), state)) {
    return;
  }
  builder.Clear();
  const std::vector<int32_t> table = BlockTable(0, context + 1);
  if (!builder.AddSequence({&tokens.back(), 1}, context, table, LogitsFor::kLast).ok()) {
    return state.SkipWithError("does not fit");
  }
  for (auto _ : state) {
    auto logits = f.model->Forward(builder.View(), *f.pool);
    if (!logits.ok()) return state.SkipWithError(std::string(logits.status().message()).c_str());
    benchmark::DoNotOptimize(logits->data());
  }
}
BENCHMARK(BM_NextToken_Cached)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same next token with no cache: the whole context + 1 tokens recomputed as one prefill.
void BM_NextToken_Recompute(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t context = static_cast<int32_t>(state.range(0));
  const std::vector<int32_t> tokens = RandomTokens(context + 1, f.weights.config.vocab_size, 7);
  ForwardBatchBuilder builder(kBlockSize, kBlocksPerSeq, kMaxTokens, kMaxSeqs);
  for (auto _ : state) {
    if (!Prefill(f, builder, 0, tokens, state)) break;
  }
}
BENCHMARK(BM_NextToken_Recompute)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
