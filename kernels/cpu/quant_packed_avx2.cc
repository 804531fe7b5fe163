// The AVX2 kernel on the packed form of quant_linear.h (compiled with -mavx2 -mfma -mf16c; called
// only where the CPU has them). It uses no AVX-VNNI or AVX-512 instruction: the target is
// AVX2-only.
//
// Lane r of every vector is row r of one 8-row half of a 16-row tile (the half's 4 bytes per row
// of a packed 64-byte group are one 32-byte load). vpmaddubsw multiplies unsigned weight bytes by
// the token's 4 activation bytes (broadcast) into int16 pair sums, which are added in int16 over
// the block, and one vpmaddwd turns them into the row's exact int32 dot. Then, per (block, token),
// the reference's float operations in its order: conversion, dw * a.d, two FMAs. The integer sums
// are exact, so the result is the reference's bit for bit.
//
// Why the int16 sums cannot overflow or saturate (|a.q| <= 127 from QuantizeActivations; even
// -128 would fit): every byte multiplied here is a nibble, u in [0, 15].
//  - Q4_0 / Q4_1: a block is 4 groups of nibble bytes, 8 vpmaddubsw of [0, 15] x [-128, 127]
//    pairs: each int16 lane |2 * 15 * 128| = 3840 at most, so every partial sum of the 8, in any
//    order, is at most 8 * 3840 = 30720 < 32767.
//  - Q8_0: u = q + 128 fills a byte, and vpmaddubsw on it would saturate (2 * 255 * 127 > 32767).
//    So u = 16 hi + lo, both nibbles: one int16 sum of the 8 groups' lo products and one of the
//    hi products, each bounded as above; vpmaddwd by 1 and by 16 makes dot(u, a.q) =
//    16 dot(hi, a.q) + dot(lo, a.q) in int32 (|.| <= 17 * 30720 * 2).
//
// Tokens go through a half kTokens at a time; for each block, each packed group is loaded and
// split into nibbles once and multiplied with every token of the group, whose int16 sums (one or
// two per token) and fp32 accumulators stay in the 16 vector registers (GCC needs -fno-tree-ter
// for that: see kernels/CMakeLists.txt).
//
// Like quant_dot_avx2.cc, this file calls no inline function of a shared header (std::min
// included): a copy compiled here could be the one the linker keeps for the whole program.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/quant_dispatch.h"
#include "kernels/cpu/quant_linear.h"
#include "kernels/cpu/quant_simd_util.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kHalfRows = 8;  // rows per 256-bit vector, one per 32-bit lane
static_assert(kPackRows == 2 * kHalfRows, "a tile is two 8-row halves");
// Software prefetch distance in the packed stream, as in quant_packed_avx512.cc.
constexpr int kPrefetchAhead = 2048;

int Min(int a, int b) { return a < b ? a : b; }

// 8 fp16 -> 8 fp32.
__m256 Halves(const uint8_t* p /* [8] fp16 */) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Activation bytes 4i..4i+3 in every lane.
[[gnu::always_inline]] inline __m256i Broadcast4(const int8_t* q) {
  int32_t four;
  std::memcpy(&four, q, 4);
  return _mm256_set1_epi32(four);
}

// The per-type parts: weight groups, the int16 sums a group adds to, and scales and offsets.
// kTokens: a token group's sums and accumulators, plus a group's bytes, nibbles, broadcasts and
// products, have to fit the 16 vector registers; the counts chosen are the fastest measured (576 x
// 1536, 1 thread, 8-128 tokens, -O3, AVX-512 machine capped to AVX2; Q8_0 at 3 spills a few).
struct Q8_0 {
  static constexpr int kTileBlockBytes = kPackedQ8_0BlockBytes;
  static constexpr int kGroups = 8;  // group g: elements 4g..4g+3
  static constexpr int kSums = 2;    // int16 sums per token: lo and hi nibbles
  static constexpr int kTokens = 3;  // 68-70 GMAC/s; 2: 66-67
  static __m256 Offset(const uint8_t* /*halves*/, __m256 dw) {
    return _mm256_mul_ps(_mm256_set1_ps(-128.0f), dw);
  }
};

template <bool kHasMin>  // Q4_1 (d q + m) or Q4_0 (d (q - 8))
struct Q4Legacy {
  static constexpr int kTileBlockBytes = kHasMin ? kPackedQ4_1BlockBytes : kPackedQ4_0BlockBytes;
  static constexpr int kGroups = 4;  // group g: elements 4g.. (low nibbles), 16 + 4g.. (high)
  static constexpr int kSums = 1;
  static constexpr int kTokens = 4;  // 125-131 GMAC/s; 3: 118-124, 5: 113-123
  static __m256 Offset(const uint8_t* halves /* this half's d [8] */, __m256 dw) {
    return kHasMin ? Halves(halves + kPackedHalvesBytes) : _mm256_mul_ps(_mm256_set1_ps(-8.0f), dw);
  }
};

// y[t, 8 half + r] (r < valid_rows) for kTokens tokens from x.
template <typename D, int kTokens>
void HalfInRegisters(const uint8_t* tile, int half, int valid_rows, bool prefetch,
                     int32_t num_blocks, const ActBlock* x, float* y, int32_t out_features) {
  constexpr int kWeightBytes = D::kGroups * 64;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm256_setzero_ps();
  for (int32_t b = 0; b < num_blocks; ++b) {
    const uint8_t* block = tile + int64_t{b} * D::kTileBlockBytes;
    if (prefetch) {
#pragma GCC unroll 16
      for (int line = 0; line < D::kTileBlockBytes; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchAhead + line), _MM_HINT_T0);
      }
    }
    const ActBlock* xb[kTokens];
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) xb[t] = x + int64_t{t} * num_blocks + b;
    // The block's int16 pair sums per token (Q4: one; Q8_0: the lo, then the hi nibbles'),
    // bounded in the file comment.
    __m256i sums[kTokens][D::kSums];
#pragma GCC unroll 8
    for (int g = 0; g < D::kGroups; ++g) {
      const __m256i bytes = Load256(block + 64 * g + 32 * half);
      const __m256i lo = LowNibbles(bytes), hi = HighNibbles(bytes);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        __m256i products[D::kSums];
        if constexpr (D::kSums == 2) {
          const __m256i q = Broadcast4(xb[t]->q + 4 * g);
          products[0] = _mm256_maddubs_epi16(lo, q);
          products[1] = _mm256_maddubs_epi16(hi, q);
        } else {
          products[0] =
              _mm256_add_epi16(_mm256_maddubs_epi16(lo, Broadcast4(xb[t]->q + 4 * g)),
                               _mm256_maddubs_epi16(hi, Broadcast4(xb[t]->q + 16 + 4 * g)));
        }
#pragma GCC unroll 2
        for (int k = 0; k < D::kSums; ++k) {
          sums[t][k] = g == 0 ? products[k] : _mm256_add_epi16(sums[t][k], products[k]);
        }
      }
    }
    const uint8_t* halves = block + kWeightBytes + 2 * kHalfRows * half;  // this half's d [8]
    const __m256 dw = Halves(halves);
    const __m256 off = D::Offset(halves, dw);
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      __m256i dot = _mm256_madd_epi16(sums[t][0], ones);
      if constexpr (D::kSums == 2) {  // + 16 x the hi nibbles' sum
        dot = _mm256_add_epi32(_mm256_madd_epi16(sums[t][1], _mm256_set1_epi16(16)), dot);
      }
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(xb[t]->d));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[t]);
      acc[t] = _mm256_fmadd_ps(off, _mm256_set1_ps(xb[t]->s), acc[t]);
    }
  }
  const __m256i store_mask =
      _mm256_cmpgt_epi32(_mm256_set1_epi32(valid_rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    _mm256_maskstore_ps(y + int64_t{t} * out_features + kHalfRows * half, store_mask, acc[t]);
  }
}

template <typename D, int... kCounts>
constexpr auto MakeTable(std::integer_sequence<int, kCounts...>) {
  using Fn = void (*)(const uint8_t*, int, int, bool, int32_t, const ActBlock*, float*, int32_t);
  struct Table {
    Fn fn[sizeof...(kCounts)];
  };
  return Table{{&HalfInRegisters<D, kCounts + 1>...}};
}

template <typename D>
void Packed(const QuantRowsArgs& a, int32_t row_begin, int32_t row_end) {
  // The kernels by token count (index count - 1).
  static constexpr auto kTable = MakeTable<D>(std::make_integer_sequence<int, D::kTokens>{});
  const int64_t tile_bytes = int64_t{a.num_blocks} * D::kTileBlockBytes;
  for (int32_t r0 = row_begin; r0 < row_end; r0 += kPackRows) {
    const uint8_t* tile = a.w + (r0 / kPackRows) * tile_bytes;
    for (int half = 0; half < 2; ++half) {
      const int valid_rows = Min(kHalfRows, row_end - r0 - kHalfRows * half);
      if (valid_rows <= 0) break;
      // The first pass over the tile streams it from memory; the others find it in cache.
      for (int32_t t0 = 0; t0 < a.num_tokens; t0 += D::kTokens) {
        kTable.fn[Min(D::kTokens, a.num_tokens - t0) - 1](
            tile, half, valid_rows, half == 0 && t0 == 0, a.num_blocks,
            a.x + int64_t{t0} * a.num_blocks, a.y + int64_t{t0} * a.out_features + r0,
            a.out_features);
      }
    }
  }
}

using Decoders = QuantDecoders<Q8_0, Q4Legacy<false>, Q4Legacy<true>>;

}  // namespace

QuantPackedFn QuantPackedAvx2(DType w_dtype) {
  return Decoders::KernelFor<QuantPackedFn>(w_dtype,
                                            []<typename D>(DecoderTag<D>) { return &Packed<D>; });
}

}  // namespace kvserve::kernels::cpu
