// The tiled AVX-512 kernel of quant_linear.h (compiled with -mavx512f/bw/vl/vnni; called only
// where the CPU has them). See QuantTileFn there for the arithmetic.
//
// Per 64-weight pair, a (row, token) costs four vector operations: vpdpbusd of the row's 64
// unsigned bytes with the token's 64 int8 activations (16 int32 lanes of 4 products), its
// conversion to fp32, the product of the two lane scale vectors, and one FMA into the
// accumulator. Decoding a row is paid once per tile of up to 4 rows for every token, and loading
// a token's pair once per 4 rows, so at 32 tokens the decode is ~1/30 of the work (the
// row-at-a-time kernel in quant_dot_avx512.cc decodes every pair again for each 4 tokens).
//
// Like quant_dot_avx512.cc, this file calls no inline function of a shared header (std::min
// included): a copy compiled here could be the one the linker keeps for the whole program.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/quant_avx512_util.h"
#include "kernels/cpu/quant_dispatch.h"
#include "kernels/cpu/quant_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kTileRows = kQuantTileRows;
constexpr int kTileTokens = 6;  // 4 x 6 accumulators + operands fit the 32 vector registers

int Min(int a, int b) { return a < b ? a : b; }

void Store(WeightPair* pair, __m512i u, __m512 dw) {
  _mm512_store_si512(pair->u, u);
  _mm512_store_ps(pair->dw, dw);
}

// Decoders: one row of GGUF blocks -> num_pairs WeightPairs and num_blocks offsets.
struct Q8_0 {
  static constexpr int kBlockBytes = 34;
  static void Decode(const uint8_t* row, int32_t num_blocks, WeightPair* pairs, float* off) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));  // w + 128 as a u8
    for (int32_t b = 0; b < num_blocks; b += 2) {
      const uint8_t* first = row + b * kBlockBytes;
      const bool both = b + 1 < num_blocks;
      const uint8_t* second = first + kBlockBytes;
      const float d0 = LoadHalf(first), d1 = both ? LoadHalf(second) : 0.0f;
      const __m256i u1 =
          both ? _mm256_xor_si256(Load256(second + 2), flip) : _mm256_setzero_si256();
      Store(&pairs[b / 2], Join(_mm256_xor_si256(Load256(first + 2), flip), u1),
            JoinScalars(d0, d1));
      off[b] = -128.0f * d0;
      if (both) off[b + 1] = -128.0f * d1;
    }
  }
};

template <bool kHasMin>  // Q4_1 (d q + m) or Q4_0 (d (q - 8))
struct Q4Legacy {
  static constexpr int kBlockBytes = kHasMin ? 20 : 18;
  static constexpr int kNibbles = kHasMin ? 4 : 2;
  static void Decode(const uint8_t* row, int32_t num_blocks, WeightPair* pairs, float* off) {
    for (int32_t b = 0; b < num_blocks; b += 2) {
      const uint8_t* first = row + b * kBlockBytes;
      const bool both = b + 1 < num_blocks;
      const uint8_t* second = first + kBlockBytes;
      const float d0 = LoadHalf(first), d1 = both ? LoadHalf(second) : 0.0f;
      const __m256i u1 = both ? SplitNibbles(second + kNibbles) : _mm256_setzero_si256();
      Store(&pairs[b / 2], Join(SplitNibbles(first + kNibbles), u1), JoinScalars(d0, d1));
      off[b] = kHasMin ? LoadHalf(first + 2) : -8.0f * d0;
      if (both) off[b + 1] = kHasMin ? LoadHalf(second + 2) : -8.0f * d1;
    }
  }
};

// A super-block of 256 is four pairs: pair m = sub-blocks 2m (low nibbles of its 32 bytes) and
// 2m + 1 (high nibbles), with Q5_K's fifth bits from bit pair m of the 32 high-bit bytes.
template <bool kFiveBit>  // Q5_K or Q4_K
struct QK {
  static constexpr int kBlockBytes = kFiveBit ? 176 : 144;
  static void Decode(const uint8_t* row, int32_t num_blocks, WeightPair* pairs, float* off) {
    for (int32_t k = 0; k < num_blocks / 8; ++k) {
      const uint8_t* block = row + k * kBlockBytes;
      uint8_t scales[8], mins[8];
      UnpackKScalesMins(block + 4, scales, mins);
      const float d = LoadHalf(block), dmin = LoadHalf(block + 2);
      for (int m = 0; m < 4; ++m) {
        const __m256i bytes = Load256(block + (kFiveBit ? 48 : 16) + 32 * m);
        __m512i u = Join(LowNibbles(bytes), HighNibbles(bytes));
        if (kFiveBit) {
          const __m512i high = _mm512_broadcast_i64x4(Load256(block + 16));
          const __m512i bits = Join(_mm256_set1_epi8(static_cast<char>(1 << (2 * m))),
                                    _mm256_set1_epi8(static_cast<char>(1 << (2 * m + 1))));
          u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(high, bits), u, _mm512_set1_epi8(0x10));
        }
        Store(&pairs[4 * k + m], u,
              JoinScalars(d * static_cast<float>(scales[2 * m]),
                          d * static_cast<float>(scales[2 * m + 1])));
        off[8 * k + 2 * m] = -dmin * static_cast<float>(mins[2 * m]);
        off[8 * k + 2 * m + 1] = -dmin * static_cast<float>(mins[2 * m + 1]);
      }
    }
  }
};

// y for kRows decoded rows x kTokens tokens. w: [kRows, num_pairs]; off: [kRows, sums_stride];
// x, sums: the tile's first token; y: y[t0, o0].
template <int kRows, int kTokens>
void Tile(const QuantTileArgs& a, const WeightPair* w, const float* off, const ActPair* x,
          const float* sums, float* y) {
  __m512 acc[kRows][kTokens];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const int64_t np = a.num_pairs;
  for (int64_t p = 0; p < np; ++p) {
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const ActPair& xp = x[t * np + p];
      const __m512i q = _mm512_load_si512(xp.q);
      const __m512 d = _mm512_load_ps(xp.d);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const WeightPair& wp = w[r * np + p];
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_load_si512(wp.u), q);
        const __m512 scale = _mm512_mul_ps(_mm512_load_ps(wp.dw), d);
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r][t]);
      }
    }
  }
  // Offset terms: sum over blocks of off[r, b] * s[t, b], 16 blocks per FMA.
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      __m512 sum = acc[r][t];
      for (int32_t b = 0; b < a.sums_stride; b += 16) {
        sum = _mm512_fmadd_ps(_mm512_loadu_ps(off + r * a.sums_stride + b),
                              _mm512_loadu_ps(sums + t * a.sums_stride + b), sum);
      }
      y[static_cast<int64_t>(t) * a.out_features + r] = _mm512_reduce_add_ps(sum);
    }
  }
}

using TileFn = void (*)(const QuantTileArgs&, const WeightPair*, const float*, const ActPair*,
                        const float*, float*);

template <int kRows, int... kTokens>
constexpr void FillRow(TileFn* row, std::integer_sequence<int, kTokens...>) {
  ((row[kTokens] = &Tile<kRows, kTokens + 1>), ...);
}

struct TileTable {
  TileFn fn[kTileRows][kTileTokens];
  constexpr TileTable() : fn{} {
    FillRow<1>(fn[0], std::make_integer_sequence<int, kTileTokens>{});
    FillRow<2>(fn[1], std::make_integer_sequence<int, kTileTokens>{});
    FillRow<3>(fn[2], std::make_integer_sequence<int, kTileTokens>{});
    FillRow<4>(fn[3], std::make_integer_sequence<int, kTileTokens>{});
  }
};
constexpr TileTable kTiles;

template <typename D>
void Rows(const QuantTileArgs& a, int32_t row_begin, int32_t row_end,
          const QuantTileScratch& scratch) {
  for (int32_t r0 = row_begin; r0 < row_end; r0 += kTileRows) {
    const int rows = Min(kTileRows, row_end - r0);
    for (int r = 0; r < rows; ++r) {
      float* off = scratch.offsets + r * a.sums_stride;  // [sums_stride]
      for (int32_t b = a.num_blocks; b < a.sums_stride; ++b) off[b] = 0.0f;
      D::Decode(a.w + (r0 + r) * a.row_bytes, a.num_blocks, scratch.pairs + r * a.num_pairs, off);
    }
    for (int32_t t0 = 0; t0 < a.num_tokens; t0 += kTileTokens) {
      const int tokens = Min(kTileTokens, a.num_tokens - t0);
      kTiles.fn[rows - 1][tokens - 1](a, scratch.pairs, scratch.offsets,
                                      a.x + static_cast<int64_t>(t0) * a.num_pairs,
                                      a.x_sums + static_cast<int64_t>(t0) * a.sums_stride,
                                      a.y + static_cast<int64_t>(t0) * a.out_features + r0);
    }
  }
}

// No Q6_K: see QuantTileAvx512 in quant_linear.h.
using Decoders = QuantDecoders<Q8_0, Q4Legacy<false>, Q4Legacy<true>, QK<false>, QK<true>>;

}  // namespace

QuantTileFn QuantTileAvx512(DType w_dtype) {
  return Decoders::KernelFor<QuantTileFn>(w_dtype,
                                          []<typename D>(DecoderTag<D>) { return &Rows<D>; });
}

}  // namespace kvserve::kernels::cpu
