// The AVX2 kernel of dense_panels.h (compiled with -mavx2 -mfma; called only where the CPU has
// them).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/dense_panels.h"

namespace kvserve::kernels::cpu {
namespace {

// Weight types: a step is kColumns input features of a panel (kColumns * 8 weights, one load);
// Column(step, c) is column c of the step widened to fp32. kBatchTokens: a batch tile's tokens
// (x 2 panels), as many accumulators as leave registers for the weights: bf16's two widened
// columns and mask leave room for 10 (at 6 tokens GCC spilled four accumulators to the stack:
// 31.7 against 42.7 G multiply-adds/s at 5).
struct F32 {
  using Elem = float;
  static constexpr int kColumns = 1, kBatchTokens = 6;
  static __m256 Column(const float* step, int /*c*/) { return _mm256_loadu_ps(step); }
};

struct BF16 {
  using Elem = uint16_t;
  static constexpr int kColumns = 2, kBatchTokens = 5;
  // [8][2] bf16 pairs: the even column is each pair's low half shifted up, the odd column the
  // high half with the low one masked off.
  static __m256 Column(const uint16_t* step, int c) {
    const __m256i pairs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step));
    return _mm256_castsi256_ps(c == 0 ? _mm256_slli_epi32(pairs, 16)
                                      : _mm256_and_si256(pairs, _mm256_set1_epi32(-65536)));
  }
};

// Tokens [0, kTokens) of x (rows of in floats) x panels [0, kPanels) of w, over input features
// [k_begin, k_end) (k_begin a multiple of kColumns), into y (rows of y_stride floats): the chains
// start at zero where `first`, else from what y holds (the same chains as in one pass: an fp32
// accumulator stored and loaded back is the same value). `rows` of the kPanels * 8 outputs exist
// (the rest are the last panel's pad).
template <typename W, int kTokens, int kPanels>
void Tile(const typename W::Elem* w, int64_t panel_elems, const float* x, int64_t in,
          int64_t k_begin, int64_t k_end, bool first, float* y, int64_t y_stride, int rows) {
  constexpr int kColumns = W::kColumns;
  constexpr int kStep = kColumns * kPanelRows;  // elements of a step
  constexpr int kRows = kPanels * kPanelRows;
  const bool whole = rows == kRows;
  __m256 acc[kTokens][kPanels];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    const float* from = y + t * y_stride;
    alignas(32) float partial[kRows];
    if (!first && !whole) {  // the pad rows' chains start at zero: they are never stored
      std::fill(std::copy(from, from + rows, partial), partial + kRows, 0.0f);
      from = partial;
    }
#pragma GCC unroll 8
    for (int p = 0; p < kPanels; ++p) {
      acc[t][p] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(from + p * kPanelRows);
    }
  }
  const int64_t step_end = k_end / kColumns;
  for (int64_t s = k_begin / kColumns; s < step_end; ++s) {
#pragma GCC unroll 2
    for (int c = 0; c < kColumns; ++c) {
      __m256 wv[kPanels];
#pragma GCC unroll 8
      for (int p = 0; p < kPanels; ++p) wv[p] = W::Column(w + p * panel_elems + s * kStep, c);
      const int64_t k = s * kColumns + c;
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const __m256 xv = _mm256_broadcast_ss(x + t * in + k);
#pragma GCC unroll 8
        for (int p = 0; p < kPanels; ++p) acc[t][p] = _mm256_fmadd_ps(xv, wv[p], acc[t][p]);
      }
    }
  }
  if (step_end * kColumns < k_end) {  // bf16, odd in: the last step's even column alone
    const int64_t k = step_end * kColumns;
    __m256 wv[kPanels];
#pragma GCC unroll 8
    for (int p = 0; p < kPanels; ++p) wv[p] = W::Column(w + p * panel_elems + step_end * kStep, 0);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const __m256 xv = _mm256_broadcast_ss(x + t * in + k);
#pragma GCC unroll 8
      for (int p = 0; p < kPanels; ++p) acc[t][p] = _mm256_fmadd_ps(xv, wv[p], acc[t][p]);
    }
  }
  if (whole) {
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 8
      for (int p = 0; p < kPanels; ++p) {
        _mm256_storeu_ps(y + t * y_stride + p * kPanelRows, acc[t][p]);
      }
    }
    return;
  }
  for (int t = 0; t < kTokens; ++t) {
    alignas(32) float out[kRows];
    for (int p = 0; p < kPanels; ++p) _mm256_store_ps(out + p * kPanelRows, acc[t][p]);
    std::copy(out, out + rows, y + t * y_stride);
  }
}

constexpr int kBatchPanels = 2, kDecodePanels = 8;
// A batch's input features in blocks of at most kMaxBlockColumns, so a tile's slice of weights
// (2 panels: 32 KB of f32) and of token rows (12 KB) stay near L1 while it runs (256 measured
// slower on the model's widths, 576 and 1536, and 512 as fast as one pass there).
constexpr int64_t kMaxBlockColumns = 512;

// A batch tile of `tokens` (1 ... 6) x kPanels panels.
template <typename W, int kPanels>
void BatchTile(int tokens, const typename W::Elem* w, int64_t panel_elems, const float* x,
               int64_t in, int64_t k_begin, int64_t k_end, bool first, float* y, int64_t y_stride,
               int rows) {
  switch (tokens) {
    case 1:
      return Tile<W, 1, kPanels>(w, panel_elems, x, in, k_begin, k_end, first, y, y_stride, rows);
    case 2:
      return Tile<W, 2, kPanels>(w, panel_elems, x, in, k_begin, k_end, first, y, y_stride, rows);
    case 3:
      return Tile<W, 3, kPanels>(w, panel_elems, x, in, k_begin, k_end, first, y, y_stride, rows);
    case 4:
      return Tile<W, 4, kPanels>(w, panel_elems, x, in, k_begin, k_end, first, y, y_stride, rows);
    case 5:
      return Tile<W, 5, kPanels>(w, panel_elems, x, in, k_begin, k_end, first, y, y_stride, rows);
    default:
      return Tile<W, 6, kPanels>(w, panel_elems, x, in, k_begin, k_end, first, y, y_stride, rows);
  }
}

template <typename W>
void Panels(const DensePanelsArgs& a, int32_t row_begin, int32_t row_end) {
  const int64_t in = a.in_features;
  const int64_t out = a.out_features;
  const int64_t panel_elems = DensePanelElems(a.w_dtype, in);
  const auto* w = static_cast<const typename W::Elem*>(a.w);
  auto panel = [&](int32_t o) { return w + o / kPanelRows * panel_elems; };
  if (a.num_tokens == 1) {
    int32_t o = row_begin;
    for (; o + kDecodePanels * kPanelRows <= row_end; o += kDecodePanels * kPanelRows) {
      Tile<W, 1, kDecodePanels>(panel(o), panel_elems, a.x, in, 0, in, true, a.y + o, out,
                                kDecodePanels * kPanelRows);
    }
    for (; o < row_end; o += kPanelRows) {
      Tile<W, 1, 1>(panel(o), panel_elems, a.x, in, 0, in, true, a.y + o, out,
                    std::min(kPanelRows, row_end - o));
    }
    return;
  }
  // Blocks of input features of even length; in each, token tiles past the item's panels (which
  // stay in L2: 48 rows x 1536 f32 are 288 KB).
  const int64_t blocks = (in + kMaxBlockColumns - 1) / kMaxBlockColumns;
  const int64_t block_columns = ((in + blocks - 1) / blocks + 1) / 2 * 2;
  for (int64_t k_begin = 0; k_begin < in; k_begin += block_columns) {
    const int64_t k_end = std::min(in, k_begin + block_columns);
    const bool first = k_begin == 0;
    for (int32_t t0 = 0; t0 < a.num_tokens; t0 += W::kBatchTokens) {
      const int tokens = std::min(W::kBatchTokens, a.num_tokens - t0);
      const float* x = a.x + t0 * in;
      float* y = a.y + t0 * out;
      int32_t o = row_begin;
      for (; o + kBatchPanels * kPanelRows <= row_end; o += kBatchPanels * kPanelRows) {
        BatchTile<W, kBatchPanels>(tokens, panel(o), panel_elems, x, in, k_begin, k_end, first,
                                   y + o, out, kBatchPanels * kPanelRows);
      }
      for (; o < row_end; o += kPanelRows) {
        BatchTile<W, 1>(tokens, panel(o), panel_elems, x, in, k_begin, k_end, first, y + o, out,
                        std::min(kPanelRows, row_end - o));
      }
    }
  }
}

}  // namespace

void DensePanelsAvx2(const DensePanelsArgs& args, int32_t row_begin, int32_t row_end) {
  if (args.w_dtype == DType::kF32) return Panels<F32>(args, row_begin, row_end);
  if (args.w_dtype == DType::kBF16) return Panels<BF16>(args, row_begin, row_end);
}

}  // namespace kvserve::kernels::cpu
