// Linear layer: Y = X W^T with W row-major [out, in], so W is used transposed in place (no copy).
// This file dispatches by weight type: f32 weights below; bf16 / f16 weights to half_linear.h and
// GGUF block types to quant_linear.h, which compute from the weights as stored (no fp32 copy) on
// the thread pool with the SIMD level ActiveCpuIsa() picks (cpu_isa.h).
//
// f32 weights, three regimes by the number of tokens T:
//  - T == 1: our own GEMV on the thread pool, four rows of W per pass (independent chains), each
//    row's dot product the same operations as in the small-batch kernel, so a token's result is
//    the same alone or in a batch of up to kMaxSmallBatch. It measured 1.1-1.2x OpenBLAS's SGEMV
//    (with OpenBLAS's own threads) on batch-1 decode of SmolLM2 f32 (bench/RESULTS.md).
//  - 1 < T <= kMaxSmallBatch (batched decode): our own kernel, which multiplies each row of W with
//    four token rows per pass while the row sits in L1. OpenBLAS SGEMM packs all of W on every
//    call and pays a fixed cost that dominates at small T (8 x 576 x 1536: ~276 us, three times
//    this kernel on the dev machine), and one SGEMV per token reads W T times.
//    Its output rows are split over the thread pool when one is given.
//  - larger T (prefill): SGEMM (OpenBLAS threads).
// (An earlier pool measured worse for T == 1, 26 ms per batch-1 step against SGEMV's 17 ms: its
// wake-ups cost more than OpenBLAS's spinning threads then.)
#include <cblas.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>

#include "kernels/cpu/avx2_reduce.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/half_linear.h"
#include "kernels/cpu/quant_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kMaxSmallBatch = 16;
constexpr int kRowsPerItem = 64;  // output rows per thread-pool work item (~147 KB of W at 576)

// y[t, o] = dot(w[o, :], x[t, :]) for o in [row_begin, row_end), all T tokens. Portable path.
void SmallBatchRowsGeneric(const LinearParams& p, int row_begin, int row_end) {
  const int in = p.in_features;
  for (int o = row_begin; o < row_end; ++o) {
    const float* w = static_cast<const float*>(p.w) + static_cast<int64_t>(o) * in;  // [in]
    for (int t = 0; t < p.num_tokens; ++t) {
      const float* x = p.x + static_cast<int64_t>(t) * in;  // [in]
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int i = 0; i < in; ++i) acc += w[i] * x[i];
      p.y[static_cast<int64_t>(t) * p.out_features + o] = acc;
    }
  }
}

#if defined(__x86_64__)
// The same with AVX2 + FMA: four tokens per pass over a row of W, so each 8-float chunk of W is
// loaded once for four FMAs into four named accumulators (kept in registers).
__attribute__((target("avx2,fma"))) void SmallBatchRowsAvx2(const LinearParams& p, int row_begin,
                                                            int row_end) {
  const int in = p.in_features;
  const int in8 = in - in % 8;
  for (int t0 = 0; t0 < p.num_tokens; t0 += 4) {
    const int tokens = std::min(4, p.num_tokens - t0);
    // [in] each; slots past the last real token repeat it (computed, not stored).
    const float* x0 = p.x + static_cast<int64_t>(t0) * in;
    const float* x1 = p.x + static_cast<int64_t>(t0 + std::min(1, tokens - 1)) * in;
    const float* x2 = p.x + static_cast<int64_t>(t0 + std::min(2, tokens - 1)) * in;
    const float* x3 = p.x + static_cast<int64_t>(t0 + std::min(3, tokens - 1)) * in;
    const float* xs[4] = {x0, x1, x2, x3};
    for (int o = row_begin; o < row_end; ++o) {
      const float* w = static_cast<const float*>(p.w) + static_cast<int64_t>(o) * in;  // [in]
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
      for (int i = 0; i < in8; i += 8) {
        const __m256 wv = _mm256_loadu_ps(w + i);
        acc0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + i), acc0);
        acc1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + i), acc1);
        acc2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + i), acc2);
        acc3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x3 + i), acc3);
      }
      const float sums[4] = {HorizontalSum(acc0), HorizontalSum(acc1), HorizontalSum(acc2),
                             HorizontalSum(acc3)};
      for (int j = 0; j < tokens; ++j) {
        float sum = sums[j];
        for (int i = in8; i < in; ++i) sum += w[i] * xs[j][i];
        p.y[static_cast<int64_t>(t0 + j) * p.out_features + o] = sum;
      }
    }
  }
}

// One token (x = p.x) against rows [row_begin, row_end), four rows per pass. Per row the
// arithmetic of SmallBatchRowsAvx2: one 8-lane FMA chain over the row, HorizontalSum, the tail.
__attribute__((target("avx2,fma"))) void GemvRowsAvx2(const LinearParams& p, int row_begin,
                                                      int row_end) {
  const int in = p.in_features;
  const int in8 = in - in % 8;
  const float* x = p.x;  // [in]
  const auto* weights = static_cast<const float*>(p.w);
  int o = row_begin;
  for (; o + 4 <= row_end; o += 4) {
    const float* w0 = weights + static_cast<int64_t>(o) * in;  // [4, in]
    const float* w1 = w0 + in;
    const float* w2 = w1 + in;
    const float* w3 = w2 + in;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    for (int i = 0; i < in8; i += 8) {
      const __m256 xv = _mm256_loadu_ps(x + i);
      acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), xv, acc0);
      acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), xv, acc1);
      acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), xv, acc2);
      acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), xv, acc3);
    }
    const float* rows[4] = {w0, w1, w2, w3};
    const float sums[4] = {HorizontalSum(acc0), HorizontalSum(acc1), HorizontalSum(acc2),
                           HorizontalSum(acc3)};
    for (int j = 0; j < 4; ++j) {
      float sum = sums[j];
      for (int i = in8; i < in; ++i) sum += rows[j][i] * x[i];
      p.y[o + j] = sum;
    }
  }
  if (o < row_end) SmallBatchRowsAvx2(p, o, row_end);
}

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

void SmallBatchRows(const LinearParams& p, int row_begin, int row_end) {
#if defined(__x86_64__)
  if (HasAvx2Fma()) return SmallBatchRowsAvx2(p, row_begin, row_end);
#endif
  SmallBatchRowsGeneric(p, row_begin, row_end);
}

void GemvRows(const LinearParams& p, int row_begin, int row_end) {
#if defined(__x86_64__)
  if (HasAvx2Fma()) return GemvRowsAvx2(p, row_begin, row_end);
#endif
  SmallBatchRowsGeneric(p, row_begin, row_end);
}

void ForRows(const LinearParams& p, ThreadPool* pool, void (*rows)(const LinearParams&, int, int)) {
  ParallelForRanges(pool, p.out_features, kRowsPerItem, [&](int64_t begin, int64_t end) {
    rows(p, static_cast<int>(begin), static_cast<int>(end));
  });
}

void AddBias(const LinearParams& p) {
  if (p.bias == nullptr) return;
  for (int t = 0; t < p.num_tokens; ++t) {
    float* y = p.y + static_cast<int64_t>(t) * p.out_features;  // [out_features]
    for (int o = 0; o < p.out_features; ++o) y[o] += p.bias[o];
  }
}

void LinearF32(const LinearParams& p, ThreadPool* pool) {
  if (p.num_tokens == 1) {
    ForRows(p, pool, &GemvRows);
  } else if (p.num_tokens <= kMaxSmallBatch) {
    ForRows(p, pool, &SmallBatchRows);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p.num_tokens, p.out_features,
                p.in_features, 1.0f, p.x, p.in_features, static_cast<const float*>(p.w),
                p.in_features, 0.0f, p.y, p.out_features);
  }
}

}  // namespace

void Linear(const LinearParams& p, ThreadPool* pool) {
  if (p.num_tokens == 0 || p.out_features == 0) return;
  if (p.w_dtype == DType::kF32) {
    LinearF32(p, pool);
  } else if (p.w_dtype == DType::kBF16 || p.w_dtype == DType::kF16) {
    HalfLinear(p, pool, ActiveCpuIsa());
  } else {
    QuantLinear(&p, 1, pool, ActiveCpuIsa());
  }
  AddBias(p);
}

void LinearSameInput(const LinearParams* p, int count, ThreadPool* pool) {
  bool all_blocks = count > 0 && p[0].num_tokens > 0;
  for (int i = 0; i < count; ++i) all_blocks = all_blocks && IsBlockQuantized(p[i].w_dtype);
  if (!all_blocks) {
    for (int i = 0; i < count; ++i) Linear(p[i], pool);
    return;
  }
  QuantLinear(p, count, pool, ActiveCpuIsa());
  for (int i = 0; i < count; ++i) AddBias(p[i]);
}

}  // namespace kvserve::kernels::cpu
