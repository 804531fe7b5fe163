// Linear layer: Y = X W^T with W row-major [out, in], so W is used transposed in place (no copy).
// This file dispatches by weight type: f32 weights below; bf16 / f16 weights to half_linear.h and
// GGUF block types to quant_linear.h, which compute from the weights as stored (no fp32 copy) on
// the thread pool with the SIMD level ActiveCpuIsa() picks (cpu_isa.h).
//
// f32 and bf16 weights the backend packed at load (w_packed, AVX2 machines; dense_panels.h): the
// panel micro-kernel, each token's result the same bits alone or in any batch; on this project's
// AVX2 machine 1.04-1.1x OpenBLAS SGEMM at 128-512 tokens and 1.07-1.15x the row tiles below
// (bench/RESULTS.md). f32 weights left as rows, with AVX2: dense_rows.h's register tiles (4 rows x
// 1 token for a decode, 3 rows x 4 tokens for a batch), also batch-invariant. Without AVX2: a
// portable loop up to kMaxSmallBatch tokens, SGEMM (OpenBLAS threads) above.
#include <cblas.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dense_panels.h"
#include "kernels/cpu/dense_rows.h"
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

void LinearPanels(const LinearParams& p, ThreadPool* pool) {
  const DensePanelsArgs args{p.w, p.w_dtype, p.x, p.num_tokens, p.in_features, p.y, p.out_features};
  ParallelForRanges(pool, p.out_features, DensePanelsPerItem(p.num_tokens),
                    [&](int64_t begin, int64_t end) {
                      DensePanelsAvx2(args, static_cast<int32_t>(begin), static_cast<int32_t>(end));
                    });
}

void LinearF32(const LinearParams& p, ThreadPool* pool) {
  if (ActiveCpuIsa() >= CpuIsa::kAvx2) {
    const DenseRowsArgs args{p.w,           DType::kF32, p.x,           p.num_tokens,
                             p.in_features, p.y,         p.out_features};
    ParallelForRanges(pool, p.out_features, DenseRowsPerItem(p.num_tokens),
                      [&](int64_t begin, int64_t end) {
                        DenseRowsAvx2(args, static_cast<int32_t>(begin), static_cast<int32_t>(end));
                      });
  } else if (p.num_tokens <= kMaxSmallBatch) {
    ForRows(p, pool, &SmallBatchRowsGeneric);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p.num_tokens, p.out_features,
                p.in_features, 1.0f, p.x, p.in_features, static_cast<const float*>(p.w),
                p.in_features, 0.0f, p.y, p.out_features);
  }
}

}  // namespace

void Linear(const LinearParams& p, ThreadPool* pool) {
  if (p.num_tokens == 0 || p.out_features == 0) return;
  if (p.w_packed && HasDensePanels(p.w_dtype)) {
    LinearPanels(p, pool);
  } else if (p.w_dtype == DType::kF32) {
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

int64_t CpuBackend::PackedWeightBytes(DType dtype, int64_t rows, int64_t cols) const {
  // The packed forms are read at speed by the AVX2 and AVX-512 kernels only; without them the
  // rows as stored are faster. bf16 panels on AVX2 alone: an AVX-512 BF16 machine's vdpbf16ps
  // kernel reads the rows.
  const CpuIsa isa = ActiveCpuIsa();
  if (!pack_weights_ || isa == CpuIsa::kScalar) return 0;
  if (dtype == DType::kF32 || (dtype == DType::kBF16 && isa == CpuIsa::kAvx2)) {
    return DensePanelBytes(dtype, rows, cols);
  }
  return PackedQuantBytes(dtype, rows, cols);
}

void CpuBackend::PackWeight(const void* stored, DType dtype, int64_t rows, int64_t cols,
                            void* packed) {
  if (HasDensePanels(dtype)) return PackDensePanels(stored, dtype, rows, cols, packed);
  PackQuantRows(static_cast<const uint8_t*>(stored), dtype, rows, cols,
                static_cast<uint8_t*>(packed));
}

}  // namespace kvserve::kernels::cpu
