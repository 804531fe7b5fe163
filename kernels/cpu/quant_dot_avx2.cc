// AVX2 kernels of quant_linear.h (compiled with -mavx2 -mfma -mf16c; called only where the CPU
// has them). A 32-weight sub-block becomes 32 unsigned bytes u; vpmaddubsw multiplies them with
// the 32 int8 activations into 16 int16 pair sums (no saturation: |u| <= 128, |q| <= 127),
// vpmaddwd folds pairs into 8 int32 (with Q6_K's two 16-element scales as the multipliers), and
// one FMA adds them, times the two block scales, to a token's fp32 accumulator. Signed weights
// (Q8_0, Q6_K) enter as |w| with their sign moved onto the activations (vpsignb); unsigned ones
// (Q4_0, Q4_1, Q4_K, Q5_K) carry an offset term off * a.s added per block.
// Each weight sub-block is decoded once per group of up to four tokens.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx2_reduce.h"
#include "kernels/cpu/quant_dispatch.h"
#include "kernels/cpu/quant_linear.h"
#include "kernels/cpu/quant_simd_util.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kTokenGroup = 4;

__m256i Ones16() { return _mm256_set1_epi16(1); }

// One decoded sub-block: weights dw * w[i] + off, w[i] = u[i] (unsigned types) or
// sign(sign[i]) * u[i] (signed types); pairs of products are weighted by madd.
struct Sub {
  __m256i u;
  __m256i sign;
  __m256i madd;
  float dw;
  float off;
};

struct Q8_0 {
  static constexpr bool kSigned = true, kOffset = false;
  static constexpr int kSubBlocks = 1, kBytes = 34;
  explicit Q8_0(const uint8_t* block) : block_(block) {}
  void Get(int /*j*/, Sub* s) const {
    s->sign = Load256(block_ + 2);
    s->u = _mm256_abs_epi8(s->sign);
    s->madd = Ones16();
    s->dw = LoadHalf(block_);
  }
  const uint8_t* block_;
};

template <bool kHasMin>  // Q4_1 or Q4_0
struct Q4Legacy {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int kSubBlocks = 1, kBytes = kHasMin ? 20 : 18;
  explicit Q4Legacy(const uint8_t* block) : block_(block) {}
  void Get(int /*j*/, Sub* s) const {
    s->u = SplitNibbles(block_ + (kHasMin ? 4 : 2));
    s->madd = Ones16();
    s->dw = LoadHalf(block_);
    s->off = kHasMin ? LoadHalf(block_ + 2) : -8.0f * s->dw;
  }
  const uint8_t* block_;
};

template <bool kFiveBit>  // Q5_K or Q4_K
struct QK {
  static constexpr bool kSigned = false, kOffset = true;
  static constexpr int kSubBlocks = 8, kBytes = kFiveBit ? 176 : 144;
  explicit QK(const uint8_t* block) : block_(block) {
    UnpackKScalesMins(block + 4, scales_, mins_);
    d_ = LoadHalf(block);
    dmin_ = LoadHalf(block + 2);
  }
  void Get(int j, Sub* s) const {
    const __m256i bytes = Load256(block_ + (kFiveBit ? 48 : 16) + 32 * (j / 2));
    s->u = j % 2 == 0 ? LowNibbles(bytes) : HighNibbles(bytes);
    if (kFiveBit) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(Load256(block_ + 16), bit), bit);
      s->u = _mm256_or_si256(s->u, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
    }
    s->madd = Ones16();
    s->dw = d_ * static_cast<float>(scales_[j]);
    s->off = -dmin_ * static_cast<float>(mins_[j]);
  }
  const uint8_t* block_;
  float d_, dmin_;
  uint8_t scales_[8], mins_[8];
};

struct Q6_K {
  static constexpr bool kSigned = true, kOffset = false;
  static constexpr int kSubBlocks = 8, kBytes = 210;
  explicit Q6_K(const uint8_t* block) : block_(block), d_(LoadHalf(block + 208)) {}
  // Sub-block j = 4 half + k: elements l + 32 k of the half (see quant_dot_scalar.cc).
  void Get(int j, Sub* s) const {
    const int half = j / 4, k = j % 4;
    const __m256i low_bytes = Load256(block_ + 64 * half + 32 * (k % 2));
    const __m256i low = k < 2 ? LowNibbles(low_bytes) : HighNibbles(low_bytes);
    const __m256i high_bits = _mm256_and_si256(
        _mm256_srli_epi16(Load256(block_ + 128 + 32 * half), 2 * k), _mm256_set1_epi8(3));
    s->sign = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high_bits, 4)),
                              _mm256_set1_epi8(32));
    s->u = _mm256_abs_epi8(s->sign);
    const auto* scales = reinterpret_cast<const int8_t*>(block_ + 192 + 8 * half + 2 * k);
    s->madd = _mm256_set_m128i(_mm_set1_epi16(scales[1]), _mm_set1_epi16(scales[0]));
    s->dw = d_;
  }
  const uint8_t* block_;
  float d_;
};

// y[t0 .. t0 + kTokens, o] from weight row `row`.
template <typename D, int kTokens>
void RowTokens(const QuantRowsArgs& a, const uint8_t* row /* [row_bytes] */, int32_t t0,
               int32_t o) {
  const ActBlock* x[kTokens];  // each [num_blocks]
  __m256 acc[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    x[t] = a.x + static_cast<int64_t>(t0 + t) * a.num_blocks;
    acc[t] = _mm256_setzero_ps();
  }
  const int32_t num_weight_blocks = a.num_blocks / D::kSubBlocks;
  for (int32_t wb = 0; wb < num_weight_blocks; ++wb) {
    const D decoder(row + static_cast<int64_t>(wb) * D::kBytes);
#pragma GCC unroll 8
    for (int j = 0; j < D::kSubBlocks; ++j) {
      Sub s;
      decoder.Get(j, &s);
      const int32_t b = wb * D::kSubBlocks + j;
      // The offset in lane 0: one FMA with s adds off * s to the lane sum (a scalar accumulator
      // made the unsigned types a latency-bound chain at 4 tokens).
      __m256 offset = _mm256_setzero_ps();
      if constexpr (D::kOffset) offset = _mm256_set_ps(0, 0, 0, 0, 0, 0, 0, s.off);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        const ActBlock& xb = x[t][b];
        __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
        if constexpr (D::kSigned) q = _mm256_sign_epi8(q, s.sign);
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(s.u, q), s.madd);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s.dw * xb.d), acc[t]);
        if constexpr (D::kOffset) acc[t] = _mm256_fmadd_ps(offset, _mm256_set1_ps(xb.s), acc[t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    a.y[static_cast<int64_t>(t0 + t) * a.out_features + o] = HorizontalSum(acc[t]);
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

void QuantizeActivationsAvx2(const float* x, int32_t num_tokens, int32_t in_features,
                             ActBlock* out) {
  const int64_t num_blocks = static_cast<int64_t>(num_tokens) * (in_features / kActBlock);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < num_blocks; ++b) {
    __m256 v[4];
    __m256 amax8 = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + b * kActBlock + 8 * i);
      amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 amax4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    amax4 = _mm_max_ps(amax4, _mm_movehl_ps(amax4, amax4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(amax4, _mm_shuffle_ps(amax4, amax4, 1)));
    const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inverse));
    // int32 -> int16 -> int8 packs interleave 128-bit lanes; the permute restores the order.
    const __m256i q16_01 = _mm256_packs_epi32(q[0], q[1]);
    const __m256i q16_23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16_01, q16_23),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), q8);
    const __m256i sum8 =
        _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
    sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4E));
    sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0xB1));
    const float d = amax / 127.0f;
    out[b].d = d;
    out[b].s = d * static_cast<float>(_mm_cvtsi128_si32(sum4));
  }
}

QuantRowsFn QuantRowsAvx2(DType w_dtype) {
  return Decoders::KernelFor<QuantRowsFn>(w_dtype,
                                          []<typename D>(DecoderTag<D>) { return &Rows<D>; });
}

}  // namespace kvserve::kernels::cpu
