// AVX2 kernels of half_linear.h (compiled with -mavx2 -mfma -mf16c; called only where the CPU has
// them): 16 weights per step widened to two fp32 vectors (vcvtph2ps for f16, a zero-extend and
// 16-bit shift for bf16), each FMA'd into two accumulators per token (two chains hide the FMA
// latency when one token streams the weights), up to four tokens per pass over a row.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_reduce.h"
#include "kernels/cpu/half_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kTokenGroup = 4;

struct F16 {
  static __m256 Widen8(const uint16_t* w /* [8] */) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  }
  static float One(uint16_t w) { return _cvtsh_ss(w); }
};

struct BF16 {
  static __m256 Widen8(const uint16_t* w /* [8] */) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  static float One(uint16_t w) {
    const uint32_t bits = static_cast<uint32_t>(w) << 16;
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  }
};

template <typename W, int kTokens>
void RowTokens(const HalfRowsArgs& a, const uint16_t* w /* [in] */, int32_t t0, int32_t o) {
  const int64_t in = a.in_features;
  const float* x[kTokens];  // each [in]
  __m256 acc0[kTokens], acc1[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    x[t] = a.x + (t0 + t) * in;
    acc0[t] = _mm256_setzero_ps();
    acc1[t] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 16 <= in; i += 16) {
    const __m256 w0 = W::Widen8(w + i), w1 = W::Widen8(w + i + 8);
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc0[t]);
      acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + i + 8), acc1[t]);
    }
  }
  for (; i + 8 <= in; i += 8) {
    const __m256 w0 = W::Widen8(w + i);
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + i), acc0[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    float sum = HorizontalSum(_mm256_add_ps(acc0[t], acc1[t]));
    for (int64_t j = i; j < in; ++j) sum += W::One(w[j]) * x[t][j];
    a.y[(t0 + t) * int64_t{a.out_features} + o] = sum;
  }
}

template <typename W>
void Rows(const HalfRowsArgs& a, int32_t row_begin, int32_t row_end) {
  for (int32_t o = row_begin; o < row_end; ++o) {
    const uint16_t* w = a.w + o * int64_t{a.in_features};  // [in]
    int32_t t0 = 0;
    for (; t0 + kTokenGroup <= a.num_tokens; t0 += kTokenGroup) {
      RowTokens<W, kTokenGroup>(a, w, t0, o);
    }
    switch (a.num_tokens - t0) {
      case 3:
        RowTokens<W, 3>(a, w, t0, o);
        break;
      case 2:
        RowTokens<W, 2>(a, w, t0, o);
        break;
      case 1:
        RowTokens<W, 1>(a, w, t0, o);
        break;
      default:
        break;
    }
  }
}

}  // namespace

HalfRowsFn HalfRowsAvx2(DType w_dtype) {
  switch (w_dtype) {
    case DType::kBF16:
      return &Rows<BF16>;
    case DType::kF16:
      return &Rows<F16>;
    default:
      return nullptr;
  }
}

void WidenHalfAvx2(const uint16_t* src, bool bf16, int64_t n, float* dst) {
  int64_t i = 0;
  if (bf16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i,
                       _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
    }
    for (; i < n; ++i) {
      const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
      std::memcpy(dst + i, &bits, 4);
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
  }
}

void NarrowHalfAvx2(const float* src, int64_t n, uint16_t* dst) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound));
  }
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], kRound);
}

}  // namespace kvserve::kernels::cpu
