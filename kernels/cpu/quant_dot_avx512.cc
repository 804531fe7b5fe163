// AVX-512 kernels of quant_linear.h (compiled with -mavx512f/bw/vl/vnni; called only where the
// CPU has them). Two 32-weight sub-blocks at a time: 64 unsigned weight bytes u and the two
// matching int8 activation blocks go through one vpdpbusd (u8 x s8, four products summed per
// int32 lane, no intermediate saturation), and one FMA adds the 16 lanes, times a per-lane product
// of weight and activation scales, to a token's fp32 accumulator. Signed weights (Q8_0, Q6_K)
// enter as |w| with their sign moved onto the activations; unsigned ones (Q4_0, Q4_1, Q4_K, Q5_K)
// add off * a.s per sub-block. Q6_K's 16-element scales are folded into the per-lane scales.
// Each weight pair is decoded once per group of up to four tokens.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/quant_avx512_util.h"
#include "kernels/cpu/quant_dispatch.h"
#include "kernels/cpu/quant_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kTokenGroup = 4;

// Two decoded sub-blocks (lanes 0-7 / bytes 0-31 the first): weights dw * w + off with w = u
// (unsigned types) or sign(sign) * u (signed types).
struct Pair {
  __m512i u;
  __m512i sign;
  __m512 dw;
  float off[2];
};

// The offsets of a pair in lanes 0 and 8, zeros elsewhere: one FMA with (s0 x 8, s1 x 8) adds
// off0 s0 + off1 s1 to the lane sum. (A scalar accumulator here made the unsigned types a
// latency-bound chain, 2.5x slower at 4+ tokens.)
__m512 OffsetLanes(const Pair& p) {
  return _mm512_maskz_mov_ps(0x0101, JoinScalars(p.off[0], p.off[1]));
}

// The 32-element types decode two consecutive blocks per pair (kPairs = 1 per step of two
// blocks); the last block of an odd count goes through GetOne, its second half zero.
struct Q8_0 {
  static constexpr bool kSigned = true, kOffset = false;
  static constexpr int kPairs = 1, kBlockBytes = 34, kStepBytes = 68;
  explicit Q8_0(const uint8_t* step) : step_(step) {}
  void Get(int /*m*/, Pair* p) const {
    p->sign = Join(Load256(step_ + 2), Load256(step_ + kBlockBytes + 2));
    p->u = _mm512_abs_epi8(p->sign);
    p->dw = JoinScalars(LoadHalf(step_), LoadHalf(step_ + kBlockBytes));
  }
  void GetOne(Pair* p) const {
    p->sign = _mm512_castsi256_si512(Load256(step_ + 2));
    p->sign = _mm512_inserti64x4(p->sign, _mm256_setzero_si256(), 1);
    p->u = _mm512_abs_epi8(p->sign);
    p->dw = _mm512_set1_ps(LoadHalf(step_));
  }
  const uint8_t* step_;
};

template <bool kHasMin>  // Q4_1 or Q4_0
struct Q4Legacy {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int kPairs = 1, kBlockBytes = kHasMin ? 20 : 18, kStepBytes = 2 * kBlockBytes;
  static constexpr int kNibbles = kHasMin ? 4 : 2;
  explicit Q4Legacy(const uint8_t* step) : step_(step) {}
  void Get(int /*m*/, Pair* p) const {
    const uint8_t* second = step_ + kBlockBytes;
    p->u = Join(SplitNibbles(step_ + kNibbles), SplitNibbles(second + kNibbles));
    const float d0 = LoadHalf(step_), d1 = LoadHalf(second);
    p->dw = JoinScalars(d0, d1);
    p->off[0] = kHasMin ? LoadHalf(step_ + 2) : -8.0f * d0;
    p->off[1] = kHasMin ? LoadHalf(second + 2) : -8.0f * d1;
  }
  void GetOne(Pair* p) const {
    p->u = Join(SplitNibbles(step_ + kNibbles), _mm256_setzero_si256());
    const float d0 = LoadHalf(step_);
    p->dw = _mm512_set1_ps(d0);
    p->off[0] = kHasMin ? LoadHalf(step_ + 2) : -8.0f * d0;
    p->off[1] = 0.0f;
  }
  const uint8_t* step_;
};

template <bool kFiveBit>  // Q5_K or Q4_K; pair m = sub-blocks 2m (low nibbles), 2m + 1 (high)
struct QK {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int kPairs = 4, kStepBytes = kFiveBit ? 176 : 144;
  explicit QK(const uint8_t* block) : block_(block) {
    UnpackKScalesMins(block + 4, scales_, mins_);
    d_ = LoadHalf(block);
    dmin_ = LoadHalf(block + 2);
  }
  void Get(int m, Pair* p) const {
    const __m256i bytes = Load256(block_ + (kFiveBit ? 48 : 16) + 32 * m);
    p->u = Join(LowNibbles(bytes), HighNibbles(bytes));
    if (kFiveBit) {
      const __m512i high = _mm512_broadcast_i64x4(Load256(block_ + 16));
      const __m512i bits = Join(_mm256_set1_epi8(static_cast<char>(1 << (2 * m))),
                                _mm256_set1_epi8(static_cast<char>(1 << (2 * m + 1))));
      p->u = _mm512_mask_add_epi8(p->u, _mm512_test_epi8_mask(high, bits), p->u,
                                  _mm512_set1_epi8(0x10));
    }
    p->dw = JoinScalars(d_ * static_cast<float>(scales_[2 * m]),
                        d_ * static_cast<float>(scales_[2 * m + 1]));
    p->off[0] = -dmin_ * static_cast<float>(mins_[2 * m]);
    p->off[1] = -dmin_ * static_cast<float>(mins_[2 * m + 1]);
  }
  const uint8_t* block_;
  float d_, dmin_;
  uint8_t scales_[8], mins_[8];
};

// Pair m = sub-blocks k, k + 1 (k = 2 (m % 2)) of half m / 2: their low bits are the 64 bytes of
// the half's ql (low nibbles for k = 0, high for k = 2), their high bits bit pairs k and k + 1 of
// the half's qh; the four 16-element scales follow each other.
struct Q6_K {
  static constexpr bool kSigned = true, kOffset = false;
  static constexpr int kPairs = 4, kStepBytes = 210;
  explicit Q6_K(const uint8_t* block) : block_(block), d_(LoadHalf(block + 208)) {}
  void Get(int m, Pair* p) const {
    const int half = m / 2, k = 2 * (m % 2);
    const __m512i low_bytes = _mm512_loadu_si512(block_ + 64 * half);
    const __m512i mask = _mm512_set1_epi8(0x0F);
    const __m512i low = k == 0 ? _mm512_and_si512(low_bytes, mask)
                               : _mm512_and_si512(_mm512_srli_epi16(low_bytes, 4), mask);
    const __m256i qh = Load256(block_ + 128 + 32 * half);
    const __m512i high = _mm512_and_si512(
        Join(_mm256_srli_epi16(qh, 2 * k), _mm256_srli_epi16(qh, 2 * k + 2)), _mm512_set1_epi8(3));
    p->sign =
        _mm512_sub_epi8(_mm512_or_si512(low, _mm512_slli_epi16(high, 4)), _mm512_set1_epi8(32));
    p->u = _mm512_abs_epi8(p->sign);
    int32_t scale_bytes;
    std::memcpy(&scale_bytes, block_ + 192 + 8 * half + 2 * k, 4);
    const __m512i scales = _mm512_permutexvar_epi32(
        _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
        _mm512_castsi128_si512(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(scale_bytes))));
    p->dw = _mm512_mul_ps(_mm512_cvtepi32_ps(scales), _mm512_set1_ps(d_));
  }
  const uint8_t* block_;
  float d_;
};

// Adds pair p (activation blocks b, b + 1; b + 1 only when kBoth) to kTokens accumulators.
// Always inlined: as a call, the accumulators would go through memory on every pair (GCC stops
// inlining it for the larger decoders at four tokens, which cost 2.5x).
template <typename D, int kTokens, bool kBoth>
__attribute__((always_inline)) inline void Accumulate(const Pair& p, const ActBlock* const* x,
                                                      int32_t b, __m512* acc) {
  __m512 offsets = _mm512_setzero_ps();
  if constexpr (D::kOffset) offsets = OffsetLanes(p);
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    const ActBlock& x0 = x[t][b];
    const ActBlock& x1 = x[t][kBoth ? b + 1 : b];
    const __m256i q0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.q));
    __m512i q = Join(q0, kBoth ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.q))
                               : _mm256_setzero_si256());
    if constexpr (D::kSigned) {
      q = _mm512_mask_sub_epi8(q, _mm512_movepi8_mask(p.sign), _mm512_setzero_si512(), q);
    }
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), p.u, q);
    const __m512 scale = _mm512_mul_ps(p.dw, JoinScalars(x0.d, x1.d));
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[t]);
    if constexpr (D::kOffset) {
      acc[t] = _mm512_fmadd_ps(offsets, JoinScalars(x0.s, kBoth ? x1.s : 0.0f), acc[t]);
    }
  }
}

template <typename D, int kTokens>
void RowTokens(const QuantRowsArgs& a, const uint8_t* row /* [row_bytes] */, int32_t t0,
               int32_t o) {
  const ActBlock* x[kTokens];  // each [num_blocks]
  __m512 acc[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    x[t] = a.x + static_cast<int64_t>(t0 + t) * a.num_blocks;
    acc[t] = _mm512_setzero_ps();
  }
  constexpr int kBlocksPerStep = 2 * D::kPairs;
  const int32_t num_steps = a.num_blocks / kBlocksPerStep;
  for (int32_t step = 0; step < num_steps; ++step) {
    const D decoder(row + static_cast<int64_t>(step) * D::kStepBytes);
#pragma GCC unroll 4
    for (int m = 0; m < D::kPairs; ++m) {
      Pair p;
      decoder.Get(m, &p);
      Accumulate<D, kTokens, true>(p, x, step * kBlocksPerStep + 2 * m, acc);
    }
  }
  if constexpr (D::kPairs == 1) {
    if (a.num_blocks % 2 != 0) {  // the last 32-element block alone
      Pair p;
      D(row + static_cast<int64_t>(num_steps) * D::kStepBytes).GetOne(&p);
      Accumulate<D, kTokens, false>(p, x, a.num_blocks - 1, acc);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    a.y[static_cast<int64_t>(t0 + t) * a.out_features + o] = _mm512_reduce_add_ps(acc[t]);
  }
}

template <typename D>
void Rows(const QuantRowsArgs& a, int32_t row_begin, int32_t row_end) {
  RowsInTokenGroups<kTokenGroup>(
      a, row_begin, row_end,
      [&a]<int kTokens>(TokenCount<kTokens>, const uint8_t* row, int32_t t0, int32_t o) {
        RowTokens<D, kTokens>(a, row, t0, o);
      });
}

using Decoders = QuantDecoders<Q8_0, Q4Legacy<false>, Q4Legacy<true>, QK<false>, QK<true>, Q6_K>;

}  // namespace

void QuantizeActivationsAvx512(const float* x, int32_t num_tokens, int32_t in_features,
                               ActBlock* out) {
  const int64_t num_blocks = static_cast<int64_t>(num_tokens) * (in_features / kActBlock);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const __m512 low = _mm512_loadu_ps(x + b * kActBlock);
    const __m512 high = _mm512_loadu_ps(x + b * kActBlock + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(low), _mm512_abs_ps(high)));
    const __m512 inverse = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q_low = _mm512_cvtps_epi32(_mm512_mul_ps(low, inverse));  // nearest even
    const __m512i q_high = _mm512_cvtps_epi32(_mm512_mul_ps(high, inverse));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q), _mm512_cvtsepi32_epi8(q_low));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16), _mm512_cvtsepi32_epi8(q_high));
    const float d = amax / 127.0f;
    out[b].d = d;
    out[b].s = d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q_low, q_high)));
  }
}

QuantRowsFn QuantRowsAvx512(DType w_dtype) {
  return Decoders::KernelFor<QuantRowsFn>(w_dtype,
                                          []<typename D>(DecoderTag<D>) { return &Rows<D>; });
}

}  // namespace kvserve::kernels::cpu
