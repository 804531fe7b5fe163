// Throughput of a model through the serving engine (EngineCore: scheduler, paged KV cache,
// runner, sampling; no gRPC), so every figure measures the path that serves:
//   BM_Prefill/128           one 128-token prompt, one step: prompt tokens/s
//   BM_Decode/B              one decode step of B sequences at context ~128: tokens/s
//   BM_NextToken_Cached/1000 the next token after a 1,000-token context, K/V cached
//   BM_NextToken_Recompute/1000  the same token by recomputing the whole 1,001-token prefix
//                                (a fresh cache salt each time, so nothing is reused)
// The last two are the KV cache's reason to exist; their time ratio is the speed-up.
// The model is $KVSERVE_MODEL or the cached default model; the device and types come from
// $KVSERVE_BENCH_DEVICE (cpu, cuda), $KVSERVE_BENCH_DTYPE and $KVSERVE_BENCH_KV_DTYPE (auto);
// $KVSERVE_BENCH_ENFORCE_EAGER=1 turns the decode graphs off. Decode steps report weights_GB/s:
// the weight bytes every step reads, per second, to set against the memory bandwidth.
//
//   build/bench/model_bench --benchmark_min_time=2
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "engine/engine_core.h"
#include "engine/request_stream.h"
#include "model/default_model.h"
#include "runner/runner_factory.h"

namespace kvserve {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kMaxSeqs = 64;
constexpr int32_t kMaxContext = 1024 + 64;

std::string Env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// One engine shared by every benchmark (loading takes seconds); each benchmark's requests end
// before the next one starts.
struct Fixture {
  std::unique_ptr<EngineCore> core;
  int32_t vocab = 0;
  int64_t weight_bytes = 0;
  bool on_cpu = true;
  std::string error;
  int64_t next_id = 0;
};

Fixture& Shared() {
  static Fixture* fixture = [] {
    auto* f = new Fixture;
    absl::StatusOr<CreatedRunner> created =
        CreateLlamaRunner({.model = Env("KVSERVE_MODEL", DefaultModelPath().c_str()),
                           .device = Env("KVSERVE_BENCH_DEVICE", "cpu"),
                           .dtype = Env("KVSERVE_BENCH_DTYPE", "auto"),
                           .kv_cache_dtype = Env("KVSERVE_BENCH_KV_DTYPE", "auto"),
                           .enforce_eager = Env("KVSERVE_BENCH_ENFORCE_EAGER", "0") == "1"});
    if (!created.ok()) {
      f->error = absl::StrCat(created.status().message(), " (run scripts/setup.sh)");
      return f;
    }
    f->vocab = created->config.vocab_size;
    f->weight_bytes = created->weight_bytes;
    f->on_cpu = created->backend_name == "cpu";
    EngineOptions options;
    options.block_size = kBlockSize;
    options.num_kv_blocks = kMaxSeqs * (kMaxContext / kBlockSize) + 64;
    options.max_num_seqs = kMaxSeqs;
    options.max_num_batched_tokens = kMaxContext;
    options.max_context_len = std::min(kMaxContext, created->config.max_context);
    auto core = EngineCore::Create(options, std::move(created->runner), nullptr, nullptr);
    if (!core.ok()) {
      f->error = std::string(core.status().message());
      return f;
    }
    f->core = *std::move(core);
    return f;
  }();
  return *fixture;
}

std::vector<int32_t> RandomTokens(int32_t count, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> tokens(count);
  for (int32_t& t : tokens) t = dist(rng);
  return tokens;
}

// Submits a greedy request that runs to max_tokens; a fresh cache salt keeps it off the prefix
// cache unless `salt` is given.
bool Submit(Fixture& f, std::vector<int32_t> prompt, int32_t max_tokens, const std::string& salt,
            benchmark::State& state) {
  EngineRequest request;
  request.request_id = absl::StrCat("bench-", f.next_id++);
  request.prompt_token_ids = std::move(prompt);
  request.cache_salt = salt.empty() ? request.request_id : salt;
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = max_tokens;
  request.sampling.ignore_eos = true;
  auto stream = std::make_shared<RequestStream>(request.request_id);
  absl::Status status = f.core->ValidateRequest(request);
  if (status.ok()) status = f.core->AddRequest(f.core->MakeRequest(request, stream, absl::Now()));
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
  return status.ok();
}

bool Step(Fixture& f, benchmark::State& state) {
  absl::Status status = f.core->Step();
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
  return status.ok();
}

// Steps until every request has finished (between benchmarks and iterations).
void Finish(Fixture& f, benchmark::State& state) {
  while (f.core->has_work() && Step(f, state)) {
  }
}

// The last step decoded `batch` sequences and nothing else.
bool IsDecodeStep(const Fixture& f, int32_t batch) {
  const StepPlan& plan = f.core->last_plan();
  return static_cast<int32_t>(plan.sequences.size()) == batch &&
         plan.num_scheduled_tokens() == batch;
}

void BM_Prefill(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t len = static_cast<int32_t>(state.range(0));
  const std::vector<int32_t> prompt = RandomTokens(len, f.vocab, 1);
  for (auto _ : state) {
    if (!Submit(f, prompt, 1, "", state) || !Step(f, state)) break;  // prefill + first token
    state.PauseTiming();
    Finish(f, state);
    state.ResumeTiming();
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(len), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Prefill)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode step of `batch` sequences with ~128 tokens of context each.
void BM_Decode(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t batch = static_cast<int32_t>(state.range(0));
  if (batch > 32 && f.on_cpu) return state.SkipWithError("batch 64 is measured on GPUs only");
  constexpr int32_t kContext = 128;
  constexpr int32_t kMaxTokens = 512;  // enough decode steps for any --benchmark_min_time
  for (int32_t s = 0; s < batch; ++s) {
    if (!Submit(f, RandomTokens(kContext, f.vocab, 10 + s), kMaxTokens, "", state)) return;
  }
  // Prefill every sequence (over as many steps as the token budget needs), then time decode
  // steps only.
  while (!IsDecodeStep(f, batch)) {
    if (!Step(f, state)) return;
  }
  for (auto _ : state) {
    if (!f.core->has_work()) {
      state.SkipWithError("ran out of decode steps; lower --benchmark_min_time");
      break;
    }
    if (!Step(f, state)) break;
  }
  Finish(f, state);  // after the timed loop: not counted
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weights_GB/s"] = benchmark::Counter(
      static_cast<double>(f.weight_bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Arg(64)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The next token after a context of range(0) tokens, with the context's K/V in the cache: a
// decode step of one sequence whose context is already `context` long.
void BM_NextToken_Cached(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t context = static_cast<int32_t>(state.range(0));
  if (!Submit(f, RandomTokens(context, f.vocab, 7), 48, "", state)) return;
  while (!IsDecodeStep(f, 1)) {
    if (!Step(f, state)) return;
  }
  for (auto _ : state) {
    if (!f.core->has_work()) {
      state.SkipWithError("ran out of decode steps; lower --benchmark_min_time");
      break;
    }
    if (!Step(f, state)) break;
  }
  Finish(f, state);  // after the timed loop: not counted
}
BENCHMARK(BM_NextToken_Cached)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same next token with no cache: the whole context + 1 tokens recomputed as one prefill.
void BM_NextToken_Recompute(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t context = static_cast<int32_t>(state.range(0));
  const std::vector<int32_t> tokens = RandomTokens(context + 1, f.vocab, 7);
  for (auto _ : state) {
    if (!Submit(f, tokens, 1, "", state) || !Step(f, state)) break;
    state.PauseTiming();
    Finish(f, state);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_NextToken_Recompute)->Arg(1000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
