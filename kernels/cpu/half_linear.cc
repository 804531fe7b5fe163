// HalfLinear: the scalar reference kernel for bf16 / f16 weights, the choice of kernel by
// instruction set, and the split of output rows over the thread pool (see half_linear.h).
#include "kernels/cpu/half_linear.h"

#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dense_rows.h"

namespace kvserve::kernels::cpu {
namespace {

// Output rows per thread-pool item: 64 rows of bf16 at in = 1536 are 192 KB, about an L2.
constexpr int32_t kRowsPerItem = 64;
constexpr int kTokenGroup = 4;

template <bool kBf16>
void RowsScalar(const HalfRowsArgs& a, int32_t row_begin, int32_t row_end) {
  const int64_t in = a.in_features;
  for (int32_t o = row_begin; o < row_end; ++o) {
    const uint16_t* w = a.w + o * in;  // [in]
    for (int32_t t0 = 0; t0 < a.num_tokens; t0 += kTokenGroup) {
      const int tokens = a.num_tokens - t0 < kTokenGroup ? a.num_tokens - t0 : kTokenGroup;
      float acc[kTokenGroup] = {};
      for (int64_t i = 0; i < in; ++i) {
        const float wi = kBf16 ? BFloat16ToFloat(w[i]) : HalfToFloat(w[i]);
        for (int t = 0; t < tokens; ++t) acc[t] += wi * a.x[(t0 + t) * in + i];
      }
      for (int t = 0; t < tokens; ++t) a.y[(t0 + t) * int64_t{a.out_features} + o] = acc[t];
    }
  }
}

}  // namespace

HalfRowsFn HalfRowsScalar(DType w_dtype) {
  switch (w_dtype) {
    case DType::kBF16:
      return &RowsScalar<true>;
    case DType::kF16:
      return &RowsScalar<false>;
    default:
      return nullptr;
  }
}

void HalfLinear(const LinearParams& p, ThreadPool* pool, CpuIsa isa) {
  HalfRowsArgs args{static_cast<const uint16_t*>(p.w),
                    p.x,
                    nullptr,
                    0,
                    p.num_tokens,
                    p.in_features,
                    p.y,
                    p.out_features};
  HalfRowsFn rows = HalfRowsScalar(p.w_dtype);
  if (isa == CpuIsa::kAvx512 && p.w_dtype == DType::kBF16 && CpuHasAvx512Bf16()) {
    // x rounded to bf16 once per call, rows zero-padded to whole vdpbf16ps steps. Grown once to
    // the largest call (no allocation in steady state); read by the pool while this thread waits.
    thread_local std::vector<uint16_t> x_bf16;
    const int64_t stride = (p.in_features + kBf16DotChunk - 1) / kBf16DotChunk * kBf16DotChunk;
    const size_t needed = static_cast<size_t>(stride) * p.num_tokens;
    if (x_bf16.size() < needed) x_bf16.resize(needed);
    for (int64_t t = 0; t < p.num_tokens; ++t) {
      for (int64_t i = 0; i < stride; ++i) {
        x_bf16[t * stride + i] =
            i < p.in_features ? FloatToBFloat16(p.x[t * p.in_features + i]) : uint16_t{0};
      }
    }
    args.x_bf16 = x_bf16.data();
    args.x_bf16_stride = stride;
    rows = &HalfRowsAvx512Bf16;
  } else if (isa == CpuIsa::kAvx512) {
    rows = HalfRowsAvx512(p.w_dtype);
  } else if (isa == CpuIsa::kAvx2) {
    const DenseRowsArgs dense{p.w,           p.w_dtype, p.x,           p.num_tokens,
                              p.in_features, p.y,       p.out_features};
    ParallelForRanges(
        pool, p.out_features, DenseRowsPerItem(p.num_tokens), [&](int64_t begin, int64_t end) {
          DenseRowsAvx2(dense, static_cast<int32_t>(begin), static_cast<int32_t>(end));
        });
    return;
  }
  ParallelForRanges(pool, p.out_features, kRowsPerItem, [&](int64_t begin, int64_t end) {
    rows(args, static_cast<int32_t>(begin), static_cast<int32_t>(end));
  });
}

}  // namespace kvserve::kernels::cpu
