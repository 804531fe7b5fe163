// Throughput of a model through the serving engine (EngineCore: scheduler, paged KV cache,
// runner, sampling; no gRPC), so every figure measures the path that serves:
//   BM_Prefill/128           one 128-token prompt, one step: prompt tokens/s
//   BM_Decode/B              one decode step of B sequences at context ~128: tokens/s
//   BM_DecodeOps/B           BM_Decode's step with each backend call timed: µs per op
//   BM_NextToken_Cached/1000 the next token after a 1,000-token context, K/V cached
//   BM_NextToken_Recompute/1000  the same token by recomputing the whole 1,001-token prefix
//                                (a fresh cache salt each time, so nothing is reused)
// The last two are the KV cache's reason to exist; their time ratio is the speed-up.
//   BM_NextToken_Tiered/{device,host_tier,recompute}/1000   on an engine with a small pool and
//                                a host KV tier: the next token with the context in the pool,
//                                copied back from the host tier, or recomputed
//   BM_StepBesideHostLoads/{defer,wait}/1000  the decode step during which a request's
//                                1,000-token context comes back from the host tier, with the
//                                request deferred (its copies beside the step) or not
//   BM_PrefillOps/L          one L-token prompt (128 ... 8192) in one step, each backend call
//                            timed (kernels::TimedBackend): the share of each op, Linear's and
//                            attention's FLOP rates, and the forward's rate against
//   BM_GemmPeak              an f32 [2048 x 2048] x [2048 x 2048] Linear on the same backend:
//                            the machine's measured GEMM rate with these threads.
// The model is $KVSERVE_MODEL or the cached default model; the device and types come from
// $KVSERVE_BENCH_DEVICE (cpu, cuda), $KVSERVE_BENCH_DTYPE and $KVSERVE_BENCH_KV_DTYPE (auto);
// $KVSERVE_BENCH_ENFORCE_EAGER=1 turns the decode graphs off. Decode steps report weights_GB/s:
// the weight bytes every step reads, per second, to set against the memory bandwidth.
//
//   build/bench/model_bench --benchmark_min_time=2
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "engine/engine_core.h"
#include "engine/request_stream.h"
#include "kernels/timed_backend.h"
#include "model/default_model.h"
#include "runner/runner_factory.h"

namespace kvserve {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kMaxSeqs = 64;
constexpr int32_t kMaxContext = 1024 + 64;
constexpr int32_t kMaxPrefill = 8192;  // BM_PrefillOps' longest prompt, in one step

std::string Env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// One engine shared by every benchmark (loading takes seconds); each benchmark's requests end
// before the next one starts.
struct Fixture {
  std::unique_ptr<EngineCore> core;
  std::shared_ptr<kernels::TimedBackend> timed;  // the runner's backend; timing off but in
                                                 // BM_PrefillOps
  ModelConfig config;
  int32_t vocab = 0;
  int64_t weight_bytes = 0;  // read by every forward step
  bool on_cpu = true;
  std::string error;
  int64_t next_id = 0;
};

// Loads the model into a fresh engine; `adjust` may change the engine's options.
Fixture* Load(const std::function<void(EngineOptions&, const ModelRunner&)>& adjust) {
  {
    auto* f = new Fixture;
    absl::StatusOr<CreatedRunner> created =
        CreateLlamaRunner({.model = Env("KVSERVE_MODEL", DefaultModelPath().c_str()),
                           .device = Env("KVSERVE_BENCH_DEVICE", "cpu"),
                           .dtype = Env("KVSERVE_BENCH_DTYPE", "auto"),
                           .kv_cache_dtype = Env("KVSERVE_BENCH_KV_DTYPE", "auto"),
                           .enforce_eager = Env("KVSERVE_BENCH_ENFORCE_EAGER", "0") == "1",
                           .wrap_backend = [f](std::shared_ptr<kernels::Backend> backend) {
                             f->timed = std::make_shared<kernels::TimedBackend>(backend);
                             return std::shared_ptr<kernels::Backend>(f->timed);
                           }});
    if (!created.ok()) {
      f->error = absl::StrCat(created.status().message(), " (run scripts/setup.sh)");
      return f;
    }
    f->config = created->config;
    f->vocab = created->config.vocab_size;
    f->weight_bytes = created->weight_bytes_per_step;
    f->on_cpu = created->backend_name == "cpu";
    EngineOptions options;
    options.block_size = kBlockSize;
    options.num_kv_blocks = kMaxSeqs * (kMaxContext / kBlockSize) + kMaxPrefill / kBlockSize + 64;
    options.max_num_seqs = kMaxSeqs;
    options.max_num_batched_tokens = std::min(kMaxPrefill, created->config.max_context);
    options.max_context_len = options.max_num_batched_tokens;
    if (adjust) adjust(options, *created->runner);
    auto core = EngineCore::Create(options, std::move(created->runner), nullptr, nullptr);
    if (!core.ok()) {
      f->error = std::string(core.status().message());
      return f;
    }
    f->core = *std::move(core);
    return f;
  }
}

Fixture& Shared() {
  static Fixture* fixture = Load(nullptr);
  return *fixture;
}

// A second engine with a pool of 72 blocks (1,152 tokens) and a host KV tier of 256 blocks
// under it (BM_NextToken_Tiered): a 1,150-token prompt takes the whole pool, so it evicts
// every cached block there.
constexpr int32_t kTieredPoolBlocks = 72;
constexpr int32_t kFloodTokens = kTieredPoolBlocks * kBlockSize - 2;
Fixture& Tiered() {
  static Fixture* fixture = Load([](EngineOptions& options, const ModelRunner& runner) {
    options.num_kv_blocks = kTieredPoolBlocks;
    options.max_num_batched_tokens = 2048;
    options.max_context_len = 2048;
    options.host_kv_bytes = 256 * runner.KvBytesPerBlock(kBlockSize);
  });
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

// Steps until a step decoded `batch` sequences and nothing else: at least once, because the
// last plan before it may be the previous benchmark's (or run's) last decode step, which looks
// the same; checking it first left the new requests' prefill inside the timed loop.
bool StepUntilDecoding(Fixture& f, int32_t batch, benchmark::State& state) {
  do {
    if (!Step(f, state)) return false;
  } while (!IsDecodeStep(f, batch));
  return true;
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

// Submits `batch` sequences of 128 prompt tokens and steps until the next step decodes them
// all (prefill over as many steps as the token budget needs), so what follows times decodes.
bool StartDecodes(Fixture& f, int32_t batch, benchmark::State& state) {
  constexpr int32_t kContext = 128;
  constexpr int32_t kMaxTokens = 512;  // enough decode steps for any --benchmark_min_time
  for (int32_t s = 0; s < batch; ++s) {
    if (!Submit(f, RandomTokens(kContext, f.vocab, 10 + s), kMaxTokens, "", state)) return false;
  }
  return StepUntilDecoding(f, batch, state);
}

// One decode step of `batch` sequences with ~128 tokens of context each.
void BM_Decode(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t batch = static_cast<int32_t>(state.range(0));
  if (batch > 32 && f.on_cpu) return state.SkipWithError("batch 64 is measured on GPUs only");
  if (!StartDecodes(f, batch, state)) return;
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

// BM_Decode's step with every backend call timed (run it with $KVSERVE_BENCH_ENFORCE_EAGER=1:
// graph replays are not timed). Counters: <op>_us, the op's time per step. Each call waits for
// the device, so small ops carry a launch and a wait each.
void BM_DecodeOps(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t batch = static_cast<int32_t>(state.range(0));
  if (!StartDecodes(f, batch, state)) return;
  f.timed->Reset();
  for (auto _ : state) {
    if (!f.core->has_work()) {
      state.SkipWithError("ran out of decode steps; lower --benchmark_min_time");
      break;
    }
    f.timed->set_enabled(true);
    const bool ok = Step(f, state);
    f.timed->set_enabled(false);
    if (!ok) break;
  }
  Finish(f, state);
  const double steps = static_cast<double>(state.iterations());
  for (int op = 0; op < kernels::kNumTimedOps; ++op) {
    const kernels::OpTotals& totals = f.timed->totals(static_cast<kernels::TimedOp>(op));
    if (totals.calls == 0) continue;
    state.counters[absl::StrCat(kernels::TimedOpName(static_cast<kernels::TimedOp>(op)), "_us")] =
        totals.seconds / steps * 1e6;
  }
  f.timed->Reset();
}
BENCHMARK(BM_DecodeOps)->Arg(1)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime();

// The next token after a context of range(0) tokens, with the context's K/V in the cache: a
// decode step of one sequence whose context is already `context` long.
void BM_NextToken_Cached(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t context = static_cast<int32_t>(state.range(0));
  if (!Submit(f, RandomTokens(context, f.vocab, 7), 48, "", state)) return;
  if (!StepUntilDecoding(f, 1, state)) return;
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

// The host KV tier's worth, on the engine with the small pool (Tiered()): the next token after
// range(0) tokens of context as a new request (the context + 1 token, max_tokens 1: the step
// computes the tokens after the last cached block and samples), with the context's K/V
//   device:     still in the pool (a prefix hit attaches them);
//   host_tier:  evicted to the host tier by a 1,150-token prompt that took the whole pool, so
//               copied back (counter blocks_copied: 62 when every block came back);
//   recompute:  nowhere (a fresh cache salt): the whole context is computed again.
// Before each timed step (not timed) the context is computed and, for host_tier, the flood
// runs. (host_tier - device) / (recompute - device) is the cost of a host-tier hit as a
// fraction of recomputing it (RoutingWeights::host_hit_token_cost).
enum class ContextIn { kDevice, kHostTier, kNowhere };

void BM_NextToken_Tiered(benchmark::State& state, ContextIn where) {
  Fixture& f = Tiered();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t context = static_cast<int32_t>(state.range(0));
  const std::vector<int32_t> tokens = RandomTokens(context + 1, f.vocab, 7);
  const std::vector<int32_t> head(tokens.begin(), tokens.end() - 1);
  int64_t copied = 0;
  for (auto _ : state) {
    state.PauseTiming();
    // A fresh salt per iteration: nothing of an earlier iteration matches.
    const std::string salt = absl::StrCat("tiered-", f.next_id);
    if (!Submit(f, head, 1, salt, state)) break;
    Finish(f, state);
    if (where == ContextIn::kHostTier) {
      const uint32_t seed = 100 + static_cast<uint32_t>(f.next_id);
      if (!Submit(f, RandomTokens(kFloodTokens, f.vocab, seed), 1, "", state)) break;
      Finish(f, state);
    }
    const int64_t loaded_before = f.core->Stats().host_loaded_blocks;
    const std::string request_salt = where == ContextIn::kNowhere ? salt + "-cold" : salt;
    state.ResumeTiming();
    if (!Submit(f, tokens, 1, request_salt, state) || !Step(f, state)) break;
    state.PauseTiming();
    copied += f.core->Stats().host_loaded_blocks - loaded_before;
    Finish(f, state);
    state.ResumeTiming();
  }
  state.counters["blocks_copied"] =
      benchmark::Counter(static_cast<double>(copied), benchmark::Counter::kAvgIterations);
}
BENCHMARK_CAPTURE(BM_NextToken_Tiered, device, ContextIn::kDevice)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_NextToken_Tiered, host_tier, ContextIn::kHostTier)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_NextToken_Tiered, recompute, ContextIn::kNowhere)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Host-tier loads beside a decode step: kLoadStreams streams decode when a request arrives whose
// range(0)-token context was evicted to the host tier. Timed (manual time): the step that copies
// its blocks back. defer: the request sits out that step (--defer_host_loads, the default) and
// the copies run beside the streams' forward; wait: that step copies, then runs the streams'
// decodes and the request's last tokens. Counters: decode_step_ms, a step of the streams'
// decodes alone just before, for scale; next_step_ms, the step after (the request's tokens when
// deferred); blocks_copied, the blocks the timed step loaded.
constexpr int32_t kLoadPoolBlocks = 120;
constexpr int32_t kLoadStreams = 4;
Fixture& Loading(bool defer) {
  static Fixture* fixtures[2] = {};
  Fixture*& fixture = fixtures[defer ? 1 : 0];
  if (fixture == nullptr) {
    fixture = Load([defer](EngineOptions& options, const ModelRunner& runner) {
      options.num_kv_blocks = kLoadPoolBlocks;
      options.max_num_batched_tokens = 2048;
      options.max_context_len = 2048;
      options.host_kv_bytes = 256 * runner.KvBytesPerBlock(kBlockSize);
      options.defer_host_loads = defer;
    });
  }
  return *fixture;
}

void BM_StepBesideHostLoads(benchmark::State& state, bool defer) {
  Fixture& f = Loading(defer);
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t context = static_cast<int32_t>(state.range(0));
  const std::vector<int32_t> tokens = RandomTokens(context + 1, f.vocab, 11);
  const std::vector<int32_t> head(tokens.begin(), tokens.end() - 1);
  double decode_seconds = 0, next_seconds = 0;
  int64_t copied = 0;
  for (auto _ : state) {
    const std::string salt = absl::StrCat("loads-", f.next_id);
    if (!Submit(f, head, 1, salt, state)) break;
    Finish(f, state);
    const uint32_t seed = 200 + static_cast<uint32_t>(f.next_id);
    if (!Submit(f, RandomTokens(kLoadPoolBlocks * kBlockSize - 2, f.vocab, seed), 1, "", state)) {
      break;
    }
    Finish(f, state);
    for (int32_t i = 0; i < kLoadStreams; ++i) {
      if (!Submit(f, RandomTokens(64, f.vocab, seed + 1 + i), 32, "", state)) break;
    }
    if (!StepUntilDecoding(f, kLoadStreams, state)) break;
    absl::Time start = absl::Now();
    if (!Step(f, state)) break;
    decode_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    const int64_t loaded_before = f.core->Stats().host_loaded_blocks;
    if (!Submit(f, tokens, 1, salt, state)) break;
    start = absl::Now();
    if (!Step(f, state)) break;
    state.SetIterationTime(absl::ToDoubleSeconds(absl::Now() - start));
    copied += f.core->Stats().host_loaded_blocks - loaded_before;
    start = absl::Now();
    if (!Step(f, state)) break;
    next_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    Finish(f, state);
  }
  const double iterations = static_cast<double>(std::max<int64_t>(1, state.iterations()));
  state.counters["decode_step_ms"] = 1e3 * decode_seconds / iterations;
  state.counters["next_step_ms"] = 1e3 * next_seconds / iterations;
  state.counters["blocks_copied"] = static_cast<double>(copied) / iterations;
}
BENCHMARK_CAPTURE(BM_StepBesideHostLoads, defer, true)
    ->Arg(1000)
    ->Iterations(6)  // each iteration prefills a pool's worth (untimed)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK_CAPTURE(BM_StepBesideHostLoads, wait, false)
    ->Arg(1000)
    ->Iterations(6)  // each iteration prefills a pool's worth (untimed)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

// One L-token prompt prefilled in one step with every backend call timed. Counters: tokens/s
// (whole step, timed), <op>_% (the op's share of the timed backend time), linear_GFLOP/s,
// attention_GFLOP/s (causal: 4 x heads x head_dim x L(L+1)/2 per layer, the work a kernel
// that skips masked keys does) and forward_GFLOP/s (both, over the step's time).
void BM_PrefillOps(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  const int32_t len = std::min<int32_t>(static_cast<int32_t>(state.range(0)),
                                        f.core->options().max_num_batched_tokens - 1);
  const std::vector<int32_t> prompt = RandomTokens(len, f.vocab, 3);
  f.timed->Reset();
  for (auto _ : state) {
    if (!Submit(f, prompt, 1, "", state)) break;
    f.timed->set_enabled(true);
    const bool ok = Step(f, state);  // prefill + first token
    f.timed->set_enabled(false);
    if (!ok) break;
    state.PauseTiming();
    Finish(f, state);
    state.ResumeTiming();
  }
  const double iterations = static_cast<double>(state.iterations());
  const double op_seconds = f.timed->total_seconds();
  for (int op = 0; op < kernels::kNumTimedOps; ++op) {
    const kernels::OpTotals& totals = f.timed->totals(static_cast<kernels::TimedOp>(op));
    if (totals.calls == 0) continue;
    state.counters[absl::StrCat(kernels::TimedOpName(static_cast<kernels::TimedOp>(op)), "_%")] =
        100.0 * totals.seconds / op_seconds;
  }
  const kernels::OpTotals& linear = f.timed->totals(kernels::TimedOp::kLinear);
  const kernels::OpTotals& attention = f.timed->totals(kernels::TimedOp::kAttention);
  const ModelConfig& c = f.config;
  const double attention_flops = 4.0 * c.num_layers * c.num_heads * c.head_dim *
                                 (static_cast<double>(len) * (len + 1) / 2) * iterations;
  state.counters["prompt_tokens"] = len;
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(len), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["linear_GFLOP/s"] = linear.flops / linear.seconds * 1e-9;
  state.counters["attention_GFLOP/s"] = attention_flops / attention.seconds * 1e-9;
  state.counters["forward_GFLOP/s"] =
      benchmark::Counter((linear.flops + attention_flops) / iterations * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  f.timed->Reset();
}
BENCHMARK(BM_PrefillOps)
    ->Arg(128)
    ->Arg(512)
    ->Iterations(4)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PrefillOps)->Arg(2048)->Iterations(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PrefillOps)->Arg(8192)->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The GEMM rate of the model's backend (its threads, its f32 Linear): a [2048 x 2048] by
// [2048 x 2048] product, what prefill's FLOP rate is set against.
void BM_GemmPeak(benchmark::State& state) {
  Fixture& f = Shared();
  if (!f.error.empty()) return state.SkipWithError(f.error.c_str());
  constexpr int32_t kN = 2048;
  const size_t bytes = sizeof(float) * kN * kN;
  std::vector<float> host(size_t{kN} * kN);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : host) v = dist(rng);
  kernels::Backend& backend = *f.timed;
  // W in the backend's own form where it has one for f32 (the CPU's panels), as the model's are.
  const int64_t packed_bytes = backend.PackedWeightBytes(kernels::DType::kF32, kN, kN);
  auto* x = static_cast<float*>(backend.Allocate(bytes));
  void* w = backend.Allocate(packed_bytes > 0 ? static_cast<size_t>(packed_bytes) : bytes);
  auto* y = static_cast<float*>(backend.Allocate(bytes));
  if (x == nullptr || w == nullptr || y == nullptr) {
    state.SkipWithError("out of memory");
  } else {
    backend.CopyToDevice(x, host.data(), bytes);
    if (packed_bytes > 0) {
      backend.PackWeight(host.data(), kernels::DType::kF32, kN, kN, w);
    } else {
      backend.CopyToDevice(w, host.data(), bytes);
    }
    for (auto _ : state) {
      backend.Linear({.x = x,
                      .w = w,
                      .bias = nullptr,
                      .y = y,
                      .num_tokens = kN,
                      .in_features = kN,
                      .out_features = kN,
                      .w_packed = packed_bytes > 0});
      backend.Synchronize();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kN * kN * kN * 1e-9,
                                                   benchmark::Counter::kIsIterationInvariantRate);
  }
  for (void* p : {static_cast<void*>(x), w, static_cast<void*>(y)}) {
    if (p != nullptr) backend.Free(p);
  }
}
BENCHMARK(BM_GemmPeak)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();
