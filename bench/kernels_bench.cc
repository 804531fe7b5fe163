// Kernel micro-benchmarks on the CPU backend.
//   BM_Linear               cpu::Linear on f32 weights, T tokens x in x out, on 1 thread or a
//                           2-thread pool, rows as stored and packed in panels (dense_panels.h);
//                           counter FLOP/s (2 * T * in * out per call)
//   BM_Sgemm                OpenBLAS SGEMM on the same shapes with 1 or 2 OpenBLAS threads: the
//                           reference GEMM rate of this machine
//   BM_TypedLinear          cpu::Linear on weights stored as f32 / bf16 / f16 / q8_0 / q4_1 / q4_k
//   /
//                           q6_k at SmolLM2-135M shapes (576->1536 up/gate, 1536->576 down,
//                           576->49152 lm_head; K-quants need in % 256 == 0: down only), T = 1, 8,
//                           32, on a 2-thread pool, as stored and (Q8_0, Q4_1) packed; bytes/s of W
//                           read, and w_bw_fraction = that rate / the 2-thread read bandwidth. W is
//                           cycled through copies totalling >= 256 MiB, so it streams from DRAM as
//                           in a decode step.
//   BM_TypedLinearCompute   the same kernels on one thread with W in cache (576->1536), T = 1, 8,
//                           32, 128, as stored and packed (PackQuantRows): the arithmetic rate,
//                           multiply-adds/s of CPU time
//   BM_MemoryReadBandwidth  sum of a 256 MiB buffer, 1 and 2 threads; bytes/s read
//   BM_MemoryCopyBandwidth  memcpy of 256 MiB; bytes/s counts read + written
//   BM_PagedDecodeAttention decode attention, SmolLM2 shape (9 heads, 3 KV heads, head_dim 64,
//                           block 16), 1/8/32 sequences x 1k context; bytes/s of K+V read, and
//                           kv_bw_fraction = that rate / the 2-thread read bandwidth measured in
//                           the same process.
//   BM_PagedPrefillAttention one L-token prompt's causal attention (same shape): FLOP/s.
//   BM_Sample               one token from SmolLM2's 49152 logits: greedy, top-k 50, top-p 0.9
//                           (full sort), with 5 logprobs and penalties over a 512-token history.
// Run: build-kernels/bench/kernels_bench --benchmark_min_time=1 (figures in bench/RESULTS.md)
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/quant_linear.h"
#include "kernels/sampling.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/quant_test_util.h"

namespace kvserve::kernels {
namespace {

constexpr size_t kStreamBytes = size_t{256} << 20;

void BM_Linear(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));  // tokens
  const int k = static_cast<int>(state.range(1));  // in_features
  const int n = static_cast<int>(state.range(2));  // out_features
  const int threads = static_cast<int>(state.range(3));
  const bool packed = state.range(4) != 0;
  if (packed && cpu::ActiveCpuIsa() < cpu::CpuIsa::kAvx2) {
    state.SkipWithError("no AVX2: no panel kernel");
    return;
  }
  std::mt19937 rng(1);
  const std::vector<float> x = testing::RandomFloats(size_t{1} * m * k, rng);
  const std::vector<uint8_t> w = testing::RandomWeightsAs(n, k, DType::kF32, packed, rng);
  std::vector<float> y(size_t{1} * m * n);
  cpu::ThreadPool pool(threads);
  for (auto _ : state) {
    cpu::Linear({x.data(), w.data(), nullptr, y.data(), m, k, n, DType::kF32, packed},
                threads > 1 ? &pool : nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Sgemm(benchmark::State& state) {
  const int m = static_cast<int>(state.range(0));
  const int k = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  openblas_set_num_threads(static_cast<int>(state.range(3)));
  std::mt19937 rng(1);
  const std::vector<float> x = testing::RandomFloats(size_t{1} * m * k, rng);
  const std::vector<float> w = testing::RandomFloats(size_t{1} * n * k, rng);
  std::vector<float> y(size_t{1} * m * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.data(), k, w.data(), k,
                0.0f, y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

// The shapes; with `packed`, each as rows and as panels (BM_Linear's fifth argument).
void Shapes(benchmark::internal::Benchmark* b, bool packed) {
  b->ArgNames({"tokens", "in", "out", "threads", "packed"});
  for (int threads : {1, 2}) {
    for (auto [m, k, n] : {std::tuple{1, 576, 1536},
                           {8, 576, 1536},
                           {128, 576, 1536},
                           {512, 576, 1536},
                           {512, 1536, 576},
                           {512, 576, 576},
                           {2048, 2048, 2048}}) {
      b->Args({m, k, n, threads, 0});
      if (packed) b->Args({m, k, n, threads, 1});
    }
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
void LinearShapes(benchmark::internal::Benchmark* b) { Shapes(b, true); }
void SgemmShapes(benchmark::internal::Benchmark* b) { Shapes(b, false); }
BENCHMARK(BM_Linear)->Apply(LinearShapes);
BENCHMARK(BM_Sgemm)->Apply(SgemmShapes);

// Sums the bits of floats [begin, end) of data as pairs of 64-bit integers (16-byte vector loads),
// 8 chains each reading its own eighth of the range: the 8 streams a decode kernel's 8 weight
// panels make, which keep more reads in flight than one stream. (Until 2026-12-05 this was one
// float chain over one stream: 9.3 GB/s a core, bound by the adds, under what the f32 panels'
// decode reads on two cores, 37-40 GB/s.)
float SumRange(const float* data /* [n] */, size_t begin, size_t end) {
  using Pair = uint64_t __attribute__((vector_size(16)));
  constexpr size_t kChains = 8;
  const size_t part = (end - begin) / 4 / kChains;  // 16-byte vectors per chain
  const auto* bytes = reinterpret_cast<const char*>(data + begin);
  Pair sums[kChains] = {};
  for (size_t i = 0; i < part; ++i) {
    for (size_t j = 0; j < kChains; ++j) {
      Pair v;
      std::memcpy(&v, bytes + (j * part + i) * sizeof(Pair), sizeof(Pair));
      sums[j] += v;
    }
  }
  uint64_t total = 0;
  for (size_t i = begin + kChains * part * 4; i < end; ++i) total += static_cast<uint64_t>(data[i]);
  for (const Pair& s : sums) total ^= s[0] ^ s[1];
  return static_cast<float>(total & 0xffff);
}

// Reads the whole buffer once on pool (in 1 MiB chunks); returns the sum.
float ReadAll(const std::vector<float>& buffer, cpu::ThreadPool& pool) {
  constexpr size_t kChunk = (size_t{1} << 20) / sizeof(float);
  const size_t num_chunks = (buffer.size() + kChunk - 1) / kChunk;
  std::vector<float> partial(pool.num_threads(), 0.0f);
  pool.ParallelFor(static_cast<int64_t>(num_chunks), [&](int64_t c, int thread) {
    const size_t begin = c * kChunk;
    partial[thread] += SumRange(buffer.data(), begin, std::min(buffer.size(), begin + kChunk));
  });
  float total = 0.0f;
  for (float p : partial) total += p;
  return total;
}

std::vector<float> MakeStreamBuffer() {
  std::vector<float> buffer(kStreamBytes / sizeof(float));
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = static_cast<float>(i & 1023);
  return buffer;
}

void BM_MemoryReadBandwidth(benchmark::State& state) {
  static const std::vector<float> buffer = MakeStreamBuffer();
  cpu::ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(ReadAll(buffer, pool));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kStreamBytes);
}
BENCHMARK(BM_MemoryReadBandwidth)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MemoryCopyBandwidth(benchmark::State& state) {
  static const std::vector<float> src = MakeStreamBuffer();
  std::vector<float> dst(src.size(), 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kStreamBytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * kStreamBytes);
}
BENCHMARK(BM_MemoryCopyBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime();

// Read bandwidth on 2 threads, best of 5 passes, measured once per process (bytes/s).
double MeasuredReadBandwidth() {
  static const double bandwidth = [] {
    const std::vector<float> buffer = MakeStreamBuffer();
    cpu::ThreadPool pool(2);
    double best = 0.0;
    for (int i = 0; i < 5; ++i) {
      const auto start = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(ReadAll(buffer, pool));
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      best = std::max(best, kStreamBytes / took.count());
    }
    return best;
  }();
  return bandwidth;
}

// One paged attention call of SmolLM2's shape (9 heads, 3 KV heads, head_dim 64, block 16, f32
// cache) over `seqs`, its new K/V written, ready to run on `threads` threads.
class SmolLm2Attention {
 public:
  SmolLm2Attention(const std::vector<testing::SeqSpec>& seqs, int max_context, int threads,
                   uint32_t seed)
      : rng_(seed),
        batch_(testing::MakePagedBatch(seqs, 9, 3, 64, 16, 0, rng_)),
        view_{batch_.k_cache.data(), batch_.v_cache.data(), batch_.num_blocks, 3, 16, 64},
        pool_(threads),
        workspace_(cpu::AttentionWorkspaceBytes(
            {batch_.num_tokens, static_cast<int32_t>(seqs.size()), max_context, 9, 3, 64, 16},
            pool_.num_threads())),
        out_(batch_.q.size()),
        params_(testing::MakeAttentionParams(batch_, view_, out_.data(), workspace_.data(),
                                             workspace_.size())) {
    cpu::WriteKv({batch_.new_k.data(), batch_.new_v.data(), batch_.slot_mapping.data(),
                  batch_.num_tokens, 0, 0, view_});
  }
  SmolLm2Attention(const SmolLm2Attention&) = delete;
  SmolLm2Attention& operator=(const SmolLm2Attention&) = delete;

  void Run() {
    cpu::PagedAttention(params_, &pool_);
    benchmark::DoNotOptimize(out_.data());
  }

 private:
  std::mt19937 rng_;
  testing::PagedBatch batch_;
  PagedKvView view_;
  cpu::ThreadPool pool_;
  std::vector<char> workspace_;
  std::vector<float> out_;
  PagedAttentionParams params_;
};

void BM_PagedDecodeAttention(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const int context = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  const double bandwidth = MeasuredReadBandwidth();
  SmolLm2Attention attention(std::vector<testing::SeqSpec>(num_seqs, {context, 1}), context,
                             threads, 2);
  for (auto _ : state) attention.Run();
  const double kv_bytes = 2.0 * num_seqs * context * 3 * 64 * sizeof(float);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kv_bytes));
  state.counters["kv_bytes"] = kv_bytes;
  state.counters["kv_bw_fraction"] =
      benchmark::Counter(kv_bytes / bandwidth, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["mem_read_bw"] = bandwidth;
}
// Prefill attention of one L-token prompt (SmolLM2 shape, f32 cache, all keys causal): FLOP/s
// of the causal work, 4 x heads x head_dim x L(L+1)/2, on `threads` threads.
void BM_PagedPrefillAttention(benchmark::State& state) {
  const int len = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  SmolLm2Attention attention({{len, len}}, len, threads, 3);
  for (auto _ : state) attention.Run();
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * 9 * 64 * (double(len) * (len + 1) / 2),
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(cpu::CpuIsaName(cpu::ActiveCpuIsa()));
}
BENCHMARK(BM_PagedPrefillAttention)
    ->ArgNames({"len", "threads"})
    ->Args({512, 1})
    ->Args({2048, 1})
    ->Args({2048, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK(BM_PagedDecodeAttention)
    ->ArgNames({"seqs", "context", "threads"})
    ->Args({1, 1024, 2})
    ->Args({8, 1024, 2})
    ->Args({32, 1024, 2})
    ->Args({32, 1024, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_TypedLinear(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int tokens = static_cast<int>(state.range(1));
  const int in = static_cast<int>(state.range(2));
  const int out = static_cast<int>(state.range(3));
  const bool packed = state.range(4) != 0;
  const double bandwidth = MeasuredReadBandwidth();
  std::mt19937 rng(4);
  const std::vector<uint8_t> w = testing::RandomWeightsAs(out, in, type, packed, rng);
  const size_t copies = std::max<size_t>(1, (kStreamBytes + w.size() - 1) / w.size());
  std::vector<uint8_t> all(copies * w.size());
  for (size_t c = 0; c < copies; ++c) std::memcpy(all.data() + c * w.size(), w.data(), w.size());
  const std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * in, rng);
  std::vector<float> y(size_t{1} * tokens * out);
  cpu::ThreadPool pool(2);
  size_t next = 0;
  for (auto _ : state) {
    cpu::Linear(
        {x.data(), all.data() + next * w.size(), nullptr, y.data(), tokens, in, out, type, packed},
        &pool);
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % copies;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * w.size()));
  state.counters["w_bw_fraction"] = benchmark::Counter(
      static_cast<double>(w.size()) / bandwidth, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(DTypeName(type)) + (packed ? " packed " : " ") +
                 cpu::CpuIsaName(cpu::ActiveCpuIsa()));
}

void TypedLinearArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "T", "in", "out", "packed"});
  for (DType type : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_1,
                     DType::kQ4_K, DType::kQ6_K}) {
    for (int tokens : {1, 8, 32}) {
      for (const auto& [in, out] : {std::pair{576, 1536}, {1536, 576}, {576, 49152}}) {
        if (in % GetDTypeInfo(type).block_elements != 0) continue;
        b->Args({static_cast<int64_t>(type), tokens, in, out, 0});
        if (cpu::IsPackableQuantType(type) || cpu::HasDensePanels(type))
          b->Args({static_cast<int64_t>(type), tokens, in, out, 1});
      }
    }
  }
}
BENCHMARK(BM_TypedLinear)->Apply(TypedLinearArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();

// The kernels' arithmetic rate on one thread (no pool), W small enough to stay in cache: what
// batched decode and prefill are bound by. CPU time, so other load on the machine matters less;
// items/s counts multiply-adds (T x in x out per call).
void BM_TypedLinearCompute(benchmark::State& state) {
  const auto type = static_cast<DType>(state.range(0));
  const int tokens = static_cast<int>(state.range(1));
  const int in = static_cast<int>(state.range(2));
  const int out = static_cast<int>(state.range(3));
  const bool packed = state.range(4) != 0;
  if (packed && !cpu::IsPackableQuantType(type) && !cpu::HasDensePanels(type)) {
    state.SkipWithError("not packable");
    return;
  }
  std::mt19937 rng(5);
  const std::vector<uint8_t> w = testing::RandomWeightsAs(out, in, type, packed, rng);
  const std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * in, rng);
  std::vector<float> y(size_t{1} * tokens * out);
  for (auto _ : state) {
    cpu::Linear({x.data(), w.data(), nullptr, y.data(), tokens, in, out, type, packed}, nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * tokens * in * int64_t{out});
  state.SetLabel(std::string(DTypeName(type)) + (packed ? " packed " : " ") +
                 cpu::CpuIsaName(cpu::ActiveCpuIsa()));
}
BENCHMARK(BM_TypedLinearCompute)
    ->ArgNames({"dtype", "T", "in", "out", "packed"})
    ->ArgsProduct({{static_cast<int64_t>(DType::kQ8_0), static_cast<int64_t>(DType::kQ4_1),
                    static_cast<int64_t>(DType::kF32), static_cast<int64_t>(DType::kBF16)},
                   {1, 8, 32, 128},
                   {576},
                   {1536},
                   {0, 1}})
    ->Unit(benchmark::kMicrosecond);

void BM_Sample(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));  // 0 greedy, 1 top-k, 2 top-p
  constexpr int kVocab = 49152;
  std::mt19937 rng(3);
  const std::vector<float> logits = testing::RandomFloats(kVocab, rng, -10.0f, 10.0f);
  std::vector<int32_t> history(512);
  for (int32_t& id : history) id = static_cast<int32_t>(rng() % kVocab);
  Sampler sampler(kVocab);
  SamplingParams params;
  params.temperature = mode == 0 ? 0.0f : 0.8f;
  params.top_k = mode == 1 ? 50 : 0;
  params.top_p = mode == 2 ? 0.9f : 1.0f;
  params.repetition_penalty = 1.1f;
  params.frequency_penalty = 0.1f;
  params.num_logprobs = 5;
  const TokenHistory token_history{history.data(), 256, history.data() + 256, 256};
  uint64_t index = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(logits.data(), params, token_history, index++));
  }
}
BENCHMARK(BM_Sample)
    ->ArgName("greedy0_topk1_topp2")
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve::kernels

BENCHMARK_MAIN();
