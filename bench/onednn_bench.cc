// oneDNN's matmul against kvserve's own Linear kernels, in one process, at SmolLM2-135M's MLP
// shape (in 576 -> out 1536). Every case is BM_Linear576x1536/kernel/T/threads; items/s counts
// multiply-adds (T x 576 x 1536 per call), as BM_TypedLinearCompute in kernels_bench does. W is
// prepared once outside the timed loop and stays in cache (0.5-3.5 MiB by type: L2 or L3).
//   kernel 0  kvserve Q4_1 packed       cpu::Linear on PackQuantRows' tiles (activations quantized
//                                       per 32-block inside the call, vpdpbusd)
//   kernel 1  kvserve Q8_0 packed       the same on Q8_0
//   kernel 2  kvserve F32               cpu::Linear on f32 rows (T = 1: OpenBLAS sgemv; T <= 16:
//                                       kvserve's own loop; beyond: OpenBLAS sgemm)
//   kernel 3  oneDNN f32                matmul f32 x f32 -> f32
//   kernel 4  oneDNN bf16               matmul bf16 x bf16 -> f32; x is bf16 already (its
//                                       conversion from f32 is not counted)
//   kernel 5  oneDNN s8                 matmul s8 x s8 -> f32 with one scale per output column;
//                                       x is s8 already (not counted)
//   kernel 6  oneDNN s8 + quantize      kernel 5 plus, inside the timed loop, x quantized per token
//                                       (absmax / 127) and y's rows multiplied by those scales
// oneDNN weights use format_tag::any (its own blocked layout, reordered into once); src and dst
// are row-major. oneDNN here (Debian's 2.6) runs on OpenMP: each case calls
// omp_set_num_threads(threads) before creating its primitive; kvserve uses no pool at 1 thread
// and a cpu::ThreadPool(2) at 2; OpenBLAS gets openblas_set_num_threads(threads).
// 1 thread: T = 1, 8, 32, 128, 512, CPU time. 2 threads: T = 128, 512, real time.
// After the timed loop each oneDNN case checks a spread of its outputs against dot products of the
// values it was given, and reports an error if they differ.
// Built only where oneDNN is installed (bench/kernels.cmake). Run:
//   build/bench/onednn_bench --benchmark_min_time=0.3
// Figures in bench/RESULTS.md.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dtype.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/quant_test_util.h"

namespace kvserve::kernels {
namespace {

constexpr int kIn = 576;
constexpr int kOut = 1536;

enum Kernel : int64_t {
  kKvserveQ4_1Packed,
  kKvserveQ8_0Packed,
  kKvserveF32,
  kOnednnF32,
  kOnednnBf16,
  kOnednnS8,
  kOnednnS8Quantize,
  kNumKernels,
};

const char* KernelName(int64_t kernel) {
  static const char* const kNames[] = {"kvserve Q4_1 packed", "kvserve Q8_0 packed", "kvserve F32",
                                       "oneDNN f32",          "oneDNN bf16",         "oneDNN s8",
                                       "oneDNN s8 + quantize"};
  return kNames[kernel];
}

// One oneDNN matmul y[T, out] = x[T, in] * W^T with W held in oneDNN's chosen layout.
struct OnednnMatmul {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  dnnl::matmul matmul;
  dnnl::memory x;  // [T, in] of the activation type, row-major
  dnnl::memory y;  // [T, out] f32, row-major
  std::unordered_map<int, dnnl::memory> args;
  std::string impl;

  void Run() {
    matmul.execute(stream, args);
    stream.wait();
  }
};

// w_rows: [out, in] of `type`, row-major (kvserve's layout), reordered into the layout the
// primitive asks for. column_scales: [out] or empty (no output scales).
std::unique_ptr<OnednnMatmul> MakeOnednnMatmul(dnnl::memory::data_type type, const void* w_rows,
                                               const std::vector<float>& column_scales,
                                               int tokens) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  auto m = std::make_unique<OnednnMatmul>();
  const dnnl::memory::desc x_desc({tokens, kIn}, type, tag::ab);
  const dnnl::memory::desc w_any({kIn, kOut}, type, tag::any);
  const dnnl::memory::desc y_desc({tokens, kOut}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (!column_scales.empty()) attr.set_output_scales(1 << 1, column_scales);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_desc, w_any, y_desc), attr, m->engine);
  // {in, out} with `in` contiguous: W[o][i] at o * in + i.
  dnnl::memory w_user({{kIn, kOut}, type, tag::ba}, m->engine, const_cast<void*>(w_rows));
  dnnl::memory w(pd.weights_desc(), m->engine);
  dnnl::reorder(w_user, w).execute(m->stream, w_user, w);
  m->stream.wait();
  m->matmul = dnnl::matmul(pd);
  m->x = dnnl::memory(x_desc, m->engine);
  m->y = dnnl::memory(y_desc, m->engine);
  m->args = {{DNNL_ARG_SRC, m->x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, m->y}};
  m->impl = pd.impl_info_str();
  return m;
}

// x: [tokens, in] f32 -> q: [tokens, in] s8, scales: [tokens], symmetric per token, rounded half
// away from zero. Loops written so that GCC vectorizes them (-fopenmp-simd).
void QuantizePerToken(const float* x, int tokens, int8_t* q, float* scales) {
  for (int t = 0; t < tokens; ++t) {
    const float* row = x + static_cast<int64_t>(t) * kIn;
    float absmax = 0.0f;
#pragma omp simd reduction(max : absmax)
    for (int i = 0; i < kIn; ++i) absmax = std::max(absmax, std::fabs(row[i]));
    const float scale = absmax > 0.0f ? absmax / 127.0f : 1.0f;
    const float inverse = 1.0f / scale;
    int8_t* out = q + static_cast<int64_t>(t) * kIn;
#pragma omp simd
    for (int i = 0; i < kIn; ++i) {
      const float v = row[i] * inverse;
      out[i] = static_cast<int8_t>(static_cast<int>(v + std::copysign(0.5f, v)));
    }
    scales[t] = scale;
  }
}

// Whether y[T, out] holds token_scales[t] * column_scales[o] * dot(x_values[t], w_values[o]) on a
// spread of (t, o) pairs, within a float-rounding tolerance: guards the layouts given to oneDNN.
bool OutputsMatch(const float* y, const std::vector<float>& x_values,
                  const std::vector<float>& w_values, const std::vector<float>& column_scales,
                  const std::vector<float>& token_scales) {
  const int tokens = static_cast<int>(token_scales.size());
  for (int t = 0; t < tokens; t += std::max(1, tokens / 7)) {
    for (int o = 0; o < kOut; o += 97) {
      double dot = 0.0, magnitude = 0.0;
      for (int i = 0; i < kIn; ++i) {
        const double product =
            double{x_values[size_t{1} * t * kIn + i]} * w_values[size_t{1} * o * kIn + i];
        dot += product;
        magnitude += std::fabs(product);
      }
      const double scale = double{token_scales[t]} * column_scales[o];
      const double expected = scale * dot;
      if (std::fabs(y[size_t{1} * t * kOut + o] - expected) > 1e-4 * scale * magnitude + 1e-6) {
        return false;
      }
    }
  }
  return true;
}

void RunOnednn(benchmark::State& state, int64_t kernel, int tokens, std::mt19937& rng) {
  using dt = dnnl::memory::data_type;
  const std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * kIn, rng);
  std::vector<float> x_values(x.size());                // [T, in] as oneDNN reads them
  std::vector<float> w_values(size_t{1} * kOut * kIn);  // [out, in] as oneDNN reads them
  std::vector<float> column_scales(kOut, 1.0f);         // [out]
  std::vector<float> token_scales(tokens, 1.0f);        // [T]
  std::unique_ptr<OnednnMatmul> m;
  if (kernel == kOnednnF32) {
    w_values = testing::RandomFloats(w_values.size(), rng);
    m = MakeOnednnMatmul(dt::f32, w_values.data(), {}, tokens);
    std::memcpy(m->x.get_data_handle(), x.data(), x.size() * sizeof(float));
    x_values = x;
  } else if (kernel == kOnednnBf16) {
    const std::vector<uint8_t> w = testing::RandomWeights(kOut, kIn, DType::kBF16, rng);
    m = MakeOnednnMatmul(dt::bf16, w.data(), {}, tokens);
    const auto* w_bf16 = reinterpret_cast<const uint16_t*>(w.data());  // [out, in]
    for (size_t i = 0; i < w_values.size(); ++i) w_values[i] = BFloat16ToFloat(w_bf16[i]);
    auto* x_bf16 = static_cast<uint16_t*>(m->x.get_data_handle());  // [T, in]
    for (size_t i = 0; i < x.size(); ++i) {
      x_bf16[i] = FloatToBFloat16(x[i]);
      x_values[i] = BFloat16ToFloat(x_bf16[i]);
    }
  } else {
    std::uniform_int_distribution<int> weight(-127, 127);
    std::uniform_real_distribution<float> scale(0.001f, 0.01f);
    std::vector<int8_t> w(w_values.size());  // [out, in]
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = static_cast<int8_t>(weight(rng));
      w_values[i] = w[i];
    }
    for (float& s : column_scales) s = scale(rng);
    m = MakeOnednnMatmul(dt::s8, w.data(), column_scales, tokens);
  }
  auto* y = static_cast<float*>(m->y.get_data_handle());  // [T, out]
  const bool quantize_in_loop = kernel == kOnednnS8Quantize;
  auto* x_s8 = static_cast<int8_t*>(m->x.get_data_handle());  // [T, in], read when s8
  if (kernel == kOnednnS8) QuantizePerToken(x.data(), tokens, x_s8, token_scales.data());
  for (auto _ : state) {
    if (quantize_in_loop) QuantizePerToken(x.data(), tokens, x_s8, token_scales.data());
    m->Run();
    if (quantize_in_loop) {
      for (int t = 0; t < tokens; ++t) {
        float* row = y + static_cast<int64_t>(t) * kOut;
#pragma omp simd
        for (int o = 0; o < kOut; ++o) row[o] *= token_scales[t];
      }
    }
    benchmark::DoNotOptimize(y);
  }
  if (kernel == kOnednnS8 || kernel == kOnednnS8Quantize) {
    for (size_t i = 0; i < x_values.size(); ++i) x_values[i] = x_s8[i];
    // Without the quantization in the loop, y is left in units of the token scales.
    if (kernel == kOnednnS8) std::fill(token_scales.begin(), token_scales.end(), 1.0f);
  }
  if (!OutputsMatch(y, x_values, w_values, column_scales, token_scales)) {
    state.SkipWithError("oneDNN's output differs from the reference dot products");
    return;
  }
  state.SetLabel(std::string(KernelName(kernel)) + " " + m->impl);
}

void RunKvserve(benchmark::State& state, int64_t kernel, int tokens, int threads,
                std::mt19937& rng) {
  const DType type = kernel == kKvserveQ4_1Packed   ? DType::kQ4_1
                     : kernel == kKvserveQ8_0Packed ? DType::kQ8_0
                                                    : DType::kF32;
  const bool packed = type != DType::kF32;
  const std::vector<uint8_t> w = testing::RandomWeightsAs(kOut, kIn, type, packed, rng);
  const std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * kIn, rng);
  std::vector<float> y(size_t{1} * tokens * kOut);
  std::unique_ptr<cpu::ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<cpu::ThreadPool>(threads);
  for (auto _ : state) {
    cpu::Linear({x.data(), w.data(), nullptr, y.data(), tokens, kIn, kOut, type, packed},
                pool.get());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(KernelName(kernel));
}

void BM_Linear576x1536(benchmark::State& state) {
  const int64_t kernel = state.range(0);
  const int tokens = static_cast<int>(state.range(1));
  const int threads = static_cast<int>(state.range(2));
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  std::mt19937 rng(6);
  try {
    if (kernel >= kOnednnF32) {
      RunOnednn(state, kernel, tokens, rng);
    } else {
      RunKvserve(state, kernel, tokens, threads, rng);
    }
  } catch (const dnnl::error& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.SetItemsProcessed(state.iterations() * tokens * int64_t{kIn} * kOut);
}

// ArgsProduct varies the first argument fastest: the kernels of one T run back to back, which
// keeps their comparison fair on a VM whose speed drifts.
BENCHMARK(BM_Linear576x1536)
    ->ArgNames({"kernel", "T", "threads"})
    ->ArgsProduct({benchmark::CreateDenseRange(0, kNumKernels - 1, 1), {1, 8, 32, 128, 512}, {1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Linear576x1536)
    ->ArgNames({"kernel", "T", "threads"})
    ->ArgsProduct({benchmark::CreateDenseRange(0, kNumKernels - 1, 1), {128, 512}, {2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvserve::kernels

BENCHMARK_MAIN();
