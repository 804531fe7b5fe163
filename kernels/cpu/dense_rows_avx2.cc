// The AVX2 kernel of dense_rows.h (compiled with -mavx2 -mfma -mf16c; called only where the CPU
// has them).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx2_reduce.h"
#include "kernels/cpu/dense_rows.h"

namespace kvserve::kernels::cpu {
namespace {

// Weight types: Load8 widens 8 weights to fp32, One a single one. kChains: FMA chains per (row,
// token) pair, over alternate 8-weight slices (16-bit rows are short in bytes for their work: one
// row alone streams fastest with two chains hiding the FMA latency). The decode tile's rows and
// the batch tile's rows x tokens, as many as the 16 vector registers hold.
struct F32 {
  static constexpr int kChains = 1, kDecodeRows = 4, kBatchRows = 3, kBatchTokens = 4;
  using Elem = float;
  static __m256 Load8(const float* w) { return _mm256_loadu_ps(w); }
  static float One(float w) { return w; }
};

struct F16 {
  static constexpr int kChains = 2, kDecodeRows = 1, kBatchRows = 3, kBatchTokens = 2;
  using Elem = uint16_t;
  static __m256 Load8(const uint16_t* w) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  }
  static float One(uint16_t w) { return _cvtsh_ss(w); }
};

struct BF16 {
  static constexpr int kChains = 2, kDecodeRows = 1, kBatchRows = 3, kBatchTokens = 2;
  using Elem = uint16_t;
  static __m256 Load8(const uint16_t* w) {
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

// The weight bytes a batch's tokens stream past while they stay in L2 (half of a 512 KB L2, so
// the token rows and the outputs fit beside them).
constexpr int64_t kBlockBytes = 256 << 10;

// One 8-weight slice at i of every row of a tile into its accumulators.
template <typename W, int kRows, int kTokens>
inline void Step(const typename W::Elem* const* w, const float* const* x, int64_t i,
                 __m256 (&acc)[kRows][kTokens]) {
  __m256 wv[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) wv[r] = W::Load8(w[r] + i);
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    const __m256 xv = _mm256_loadu_ps(x[t] + i);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
  }
}

// Rows [o, o + kRows) x tokens [t0, t0 + tokens), tokens <= kTokens, whose rows of x start at
// strip: slots past the last real token repeat it (computed, not stored), so a batch's tail
// takes the same code.
template <typename W, int kRows, int kTokens>
void Tile(const DenseRowsArgs& a, const float* strip, int32_t o, int32_t t0, int tokens) {
  using Elem = typename W::Elem;
  const int64_t in = a.in_features;
  const Elem* w[kRows];     // each [in]
  const float* x[kTokens];  // each [in]
  constexpr int kChains = W::kChains;
  __m256 acc[kChains][kRows][kTokens];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) w[r] = static_cast<const Elem*>(a.w) + (o + r) * in;
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) x[t] = strip + std::min(t, tokens - 1) * in;
#pragma GCC unroll 2
  for (int c = 0; c < kChains; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) acc[c][r][t] = _mm256_setzero_ps();
    }
  }
  // Chain c takes the 8-weight slices c, c + kChains, ...; a last slice short of a whole round
  // goes to chain 0.
  int64_t i = 0;
  for (; i + 8 * kChains <= in; i += 8 * kChains) {
#pragma GCC unroll 2
    for (int c = 0; c < kChains; ++c) Step<W, kRows, kTokens>(w, x, i + 8 * c, acc[c]);
  }
  for (; i + 8 <= in; i += 8) Step<W, kRows, kTokens>(w, x, i, acc[0]);
  for (int t = 0; t < tokens; ++t) {
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      __m256 total = acc[0][r][t];
      if constexpr (kChains == 2) total = _mm256_add_ps(total, acc[1][r][t]);
      float sum = HorizontalSum(total);
      for (int64_t j = i; j < in; ++j) sum += W::One(w[r][j]) * x[t][j];
      a.y[(t0 + t) * int64_t{a.out_features} + o + r] = sum;
    }
  }
}

template <typename W>
void Rows(const DenseRowsArgs& a, int32_t row_begin, int32_t row_end) {
  if (a.num_tokens == 1) {
    const float* x = a.x;
    int32_t o = row_begin;
    for (; o + W::kDecodeRows <= row_end; o += W::kDecodeRows) {
      Tile<W, W::kDecodeRows, 1>(a, x, o, 0, 1);
    }
    for (; o < row_end; ++o) Tile<W, 1, 1>(a, x, o, 0, 1);
    return;
  }
  // A batch tile's tokens at a time past a block of rows (the block stays in L2, the token rows
  // in L1), a whole number of batch tiles.
  const int64_t row_bytes = int64_t{a.in_features} * sizeof(typename W::Elem);
  const auto block_rows = static_cast<int32_t>(
      std::max<int64_t>(kBlockBytes / row_bytes / W::kBatchRows, 1) * W::kBatchRows);
  for (int32_t block = row_begin; block < row_end; block += block_rows) {
    const int32_t block_end = std::min(block + block_rows, row_end);
    for (int32_t t0 = 0; t0 < a.num_tokens; t0 += W::kBatchTokens) {
      const int tokens = std::min(W::kBatchTokens, a.num_tokens - t0);
      const float* x = a.x + int64_t{t0} * a.in_features;
      int32_t o = block;
      for (; o + W::kBatchRows <= block_end; o += W::kBatchRows) {
        Tile<W, W::kBatchRows, W::kBatchTokens>(a, x, o, t0, tokens);
      }
      for (; o < block_end; ++o) Tile<W, 1, W::kBatchTokens>(a, x, o, t0, tokens);
    }
  }
}

}  // namespace

void DenseRowsAvx2(const DenseRowsArgs& args, int32_t row_begin, int32_t row_end) {
  switch (args.w_dtype) {
    case DType::kF32:
      return Rows<F32>(args, row_begin, row_end);
    case DType::kBF16:
      return Rows<BF16>(args, row_begin, row_end);
    case DType::kF16:
      return Rows<F16>(args, row_begin, row_end);
    default:
      return;
  }
}

}  // namespace kvserve::kernels::cpu
