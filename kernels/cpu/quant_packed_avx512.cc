// The AVX-512 VNNI kernel on the packed form of quant_linear.h (compiled with
// -mavx512f/bw/vl/vnni; called only where the CPU has them).
//
// Lane r of every vector is row r of a 16-row tile. A tile block's weights are 4 (Q4) or 8 (Q8_0)
// 64-byte loads, and a (tile block, token) costs eight vpdpbusd (4 bytes of each of the 16 rows
// against the token's 4 activation bytes, broadcast), the conversion of their exact integer sum
// to fp32, the scale product and two FMAs: 12 operations per 512 multiply-adds, where the
// row-at-a-time layout needs about four per 64. Tokens go through a tile 8 at a time, each group
// expanding the tile's blocks again in registers (as cheap as keeping an expanded copy in
// scratch, measured: the expansion is 14 operations per tile block against 96 for 8 tokens).
//
// Like quant_dot_avx512.cc, this file calls no inline function of a shared header (std::min
// included): a copy compiled here could be the one the linker keeps for the whole program.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/cpu/quant_dispatch.h"
#include "kernels/cpu/quant_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kTokenGroup = 8;  // 8 accumulators + 10 operands stay in the 32 vector registers
static_assert(kPackRows == 16, "a lane per row");
// Software prefetch distance in the packed stream: batch-1 decode 190-200 -> 230 tok/s with 2 KiB
// (kvserve-generate, 2 threads; 4 KiB 215-235), which the hardware prefetchers alone did not reach.
constexpr int kPrefetchAhead = 2048;

int Min(int a, int b) { return a < b ? a : b; }

__m512i Load(const uint8_t* p) { return _mm512_loadu_si512(p); }
__m512 Halves(const uint8_t* p /* [16] fp16 */) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Tile block expanders: the 16 rows' unsigned weights u[8], scales and offsets. Their loops are
// unrolled by pragma: GCC 12 left them rolled at -O2 and so kept u[] on the stack, a store and a
// reload per vector (Q4_1 576x1536 on one thread: 92 -> 160 GMAC/s at 1 token, 250 -> 310 at 128).
struct Q8_0 {
  static constexpr int kTileBlockBytes = kPackedQ8_0BlockBytes;
  [[gnu::always_inline]] static void Expand(const uint8_t* block, __m512i* u, __m512* dw,
                                            __m512* off) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) u[i] = Load(block + 64 * i);
    *dw = Halves(block + kPackedQ8WeightBytes);
    *off = _mm512_mul_ps(_mm512_set1_ps(-128.0f), *dw);
  }
};

template <bool kHasMin>  // Q4_1 (d q + m) or Q4_0 (d (q - 8))
struct Q4Legacy {
  static constexpr int kTileBlockBytes = kHasMin ? kPackedQ4_1BlockBytes : kPackedQ4_0BlockBytes;
  [[gnu::always_inline]] static void Expand(const uint8_t* block, __m512i* u, __m512* dw,
                                            __m512* off) {
    const __m512i low4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {  // bytes 4j..4j+3: elements 4j.. (low nibbles), 16 + 4j.. (high)
      const __m512i bytes = Load(block + 64 * j);
      u[j] = _mm512_and_si512(bytes, low4);
      u[4 + j] = _mm512_and_si512(_mm512_srli_epi32(bytes, 4), low4);
    }
    *dw = Halves(block + kPackedQ4WeightBytes);
    *off = kHasMin ? Halves(block + kPackedQ4WeightBytes + kPackedHalvesBytes)
                   : _mm512_mul_ps(_mm512_set1_ps(-8.0f), *dw);
  }
};

// Activation bytes 4i..4i+3 in every lane.
[[gnu::always_inline]] inline __m512i Broadcast4(const int8_t* q) {
  int32_t four;
  std::memcpy(&four, q, 4);
  return _mm512_set1_epi32(four);
}

// acc + the product of one tile block (u, dw, off) with activation block xb.
[[gnu::always_inline]] inline __m512 AccumulateBlock(const __m512i* u, __m512 dw, __m512 off,
                                                     const ActBlock& xb, __m512 acc) {
  // Two integer chains, so one token does not wait on the dpbusd latency; the sum is exact.
  __m512i dot0 = _mm512_setzero_si512(), dot1 = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 2) {
    dot0 = _mm512_dpbusd_epi32(dot0, u[i], Broadcast4(xb.q + 4 * i));
    dot1 = _mm512_dpbusd_epi32(dot1, u[i + 1], Broadcast4(xb.q + 4 * i + 4));
  }
  const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(xb.d));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot0, dot1)), scale, acc);
  return _mm512_fmadd_ps(off, _mm512_set1_ps(xb.s), acc);
}

// y[t, r] (r < the rows in mask) for kTokens tokens from x.
template <typename D, int kTokens>
void TileInRegisters(const uint8_t* tile, int32_t num_blocks, const ActBlock* x, float* y,
                     int32_t out_features, __mmask16 mask) {
  __m512 acc[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  for (int32_t b = 0; b < num_blocks; ++b) {
    __m512i u[8];
    __m512 dw, off;
    const uint8_t* block = tile + int64_t{b} * D::kTileBlockBytes;
#pragma GCC unroll 16
    for (int line = 0; line < D::kTileBlockBytes; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(block + kPrefetchAhead + line), _MM_HINT_T0);
    }
    D::Expand(block, u, &dw, &off);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      acc[t] = AccumulateBlock(u, dw, off, x[int64_t{t} * num_blocks + b], acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    _mm512_mask_storeu_ps(y + int64_t{t} * out_features, mask, acc[t]);
  }
}

template <typename D, int... kCounts>
constexpr auto MakeTable(std::integer_sequence<int, kCounts...>) {
  using Fn = void (*)(const uint8_t*, int32_t, const ActBlock*, float*, int32_t, __mmask16);
  struct Table {
    Fn fn[kTokenGroup];
  };
  return Table{{&TileInRegisters<D, kCounts + 1>...}};
}

template <typename D>
void Packed(const QuantRowsArgs& a, int32_t row_begin, int32_t row_end) {
  // The kernels by token count (index count - 1).
  static constexpr auto kTable = MakeTable<D>(std::make_integer_sequence<int, kTokenGroup>{});
  const int64_t tile_bytes = int64_t{a.num_blocks} * D::kTileBlockBytes;
  for (int32_t r0 = row_begin; r0 < row_end; r0 += kPackRows) {
    const uint8_t* tile = a.w + (r0 / kPackRows) * tile_bytes;
    const auto mask = static_cast<__mmask16>((1u << Min(kPackRows, row_end - r0)) - 1);
    for (int32_t t0 = 0; t0 < a.num_tokens; t0 += kTokenGroup) {
      kTable.fn[Min(kTokenGroup, a.num_tokens - t0) - 1](
          tile, a.num_blocks, a.x + int64_t{t0} * a.num_blocks,
          a.y + int64_t{t0} * a.out_features + r0, a.out_features, mask);
    }
  }
}

using Decoders = QuantDecoders<Q8_0, Q4Legacy<false>, Q4Legacy<true>>;

}  // namespace

QuantPackedFn QuantPackedAvx512(DType w_dtype) {
  return Decoders::KernelFor<QuantPackedFn>(w_dtype,
                                            []<typename D>(DecoderTag<D>) { return &Packed<D>; });
}

}  // namespace kvserve::kernels::cpu
