// AVX-512 kernels of half_linear.h (compiled with -mavx512f/bw/vl/bf16; called only where the CPU
// has them). Widening kernels as half_dot_avx2.cc with 16-float vectors and masked loads for the
// tail of a row; and for bf16 weights on CPUs with AVX512-BF16, vdpbf16ps on 32 bf16 weights and
// the 32 matching bf16 activations per step (x rounded once per call by HalfLinear).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/half_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kTokenGroup = 4;

// The first n (<= 16) weights at w widened to fp32, zeros after them.
struct F16 {
  static __m512 Widen16(const uint16_t* w, __mmask16 n_mask) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(n_mask, w));
  }
};
struct BF16 {
  static __m512 Widen16(const uint16_t* w, __mmask16 n_mask) {
    const __m512i bits = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(n_mask, w));
    return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
  }
};

__mmask16 FirstLanes16(int64_t n) {
  return n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
}

template <typename W, int kTokens>
void RowTokens(const HalfRowsArgs& a, const uint16_t* w /* [in] */, int32_t t0, int32_t o) {
  const int64_t in = a.in_features;
  const float* x[kTokens];  // each [in]
  __m512 acc0[kTokens], acc1[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    x[t] = a.x + (t0 + t) * in;
    acc0[t] = _mm512_setzero_ps();
    acc1[t] = _mm512_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 32 <= in; i += 32) {
    const __m512 w0 = W::Widen16(w + i, 0xFFFF), w1 = W::Widen16(w + i + 16, 0xFFFF);
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      acc0[t] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[t] + i), acc0[t]);
      acc1[t] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[t] + i + 16), acc1[t]);
    }
  }
  for (; i < in; i += 16) {  // the last 1..31 weights, 16 at a time, masked
    const __mmask16 mask = FirstLanes16(in - i);
    const __m512 w0 = W::Widen16(w + i, mask);
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      acc0[t] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(mask, x[t] + i), acc0[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    a.y[(t0 + t) * int64_t{a.out_features} + o] =
        _mm512_reduce_add_ps(_mm512_add_ps(acc0[t], acc1[t]));
  }
}

template <int kTokens>
void RowTokensBf16Dot(const HalfRowsArgs& a, const uint16_t* w /* [in] */, int32_t t0, int32_t o) {
  const int64_t in = a.in_features;
  const uint16_t* x[kTokens];  // each [x_bf16_stride], zero-padded
  __m512 acc[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    x[t] = a.x_bf16 + (t0 + t) * a.x_bf16_stride;
    acc[t] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < in; i += kBf16DotChunk) {
    const int64_t left = in - i;
    const __mmask32 mask =
        left >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((uint64_t{1} << left) - 1);
    const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, w + i));
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x[t] + i));
      acc[t] = _mm512_dpbf16_ps(acc[t], wv, xv);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    a.y[(t0 + t) * int64_t{a.out_features} + o] = _mm512_reduce_add_ps(acc[t]);
  }
}

// Runs Tile<kTokens>::Run over every row and token group.
template <template <int> class Tile>
void ForTiles(const HalfRowsArgs& a, int32_t row_begin, int32_t row_end) {
  for (int32_t o = row_begin; o < row_end; ++o) {
    const uint16_t* w = a.w + o * int64_t{a.in_features};  // [in]
    int32_t t0 = 0;
    for (; t0 + kTokenGroup <= a.num_tokens; t0 += kTokenGroup) Tile<kTokenGroup>::Run(a, w, t0, o);
    switch (a.num_tokens - t0) {
      case 3:
        Tile<3>::Run(a, w, t0, o);
        break;
      case 2:
        Tile<2>::Run(a, w, t0, o);
        break;
      case 1:
        Tile<1>::Run(a, w, t0, o);
        break;
      default:
        break;
    }
  }
}

template <typename W>
struct Widening {
  template <int kTokens>
  struct Tile {
    static void Run(const HalfRowsArgs& a, const uint16_t* w, int32_t t0, int32_t o) {
      RowTokens<W, kTokens>(a, w, t0, o);
    }
  };
};

template <int kTokens>
struct Bf16DotTile {
  static void Run(const HalfRowsArgs& a, const uint16_t* w, int32_t t0, int32_t o) {
    RowTokensBf16Dot<kTokens>(a, w, t0, o);
  }
};

}  // namespace

HalfRowsFn HalfRowsAvx512(DType w_dtype) {
  switch (w_dtype) {
    case DType::kBF16:
      return &ForTiles<Widening<BF16>::Tile>;
    case DType::kF16:
      return &ForTiles<Widening<F16>::Tile>;
    default:
      return nullptr;
  }
}

void HalfRowsAvx512Bf16(const HalfRowsArgs& args, int32_t row_begin, int32_t row_end) {
  ForTiles<Bf16DotTile>(args, row_begin, row_end);
}

}  // namespace kvserve::kernels::cpu
