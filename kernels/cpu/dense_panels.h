// Dense weights (f32, bf16) in panels of 8 output rows, packed once at load, and the AVX2 + FMA
// Linear on them: the kernel behind cpu::Linear for a packed f32 or bf16 weight
// (LinearParams::w_packed; CpuBackend::PackWeight writes the form where this kernel runs).
//
// The form: output rows in panels of kPanelRows (the last zero-padded), each panel its in_features
// columns one after another, a column's 8 weights side by side, so one vector load is one input
// feature's weights for 8 outputs:
//   f32:  panel p = float [in][8],                 w(8p + j, k) at [k][j]
//   bf16: panel p = uint16 [in_pad / 2][8][2],     w(8p + j, k) at [k / 2][j][k % 2]
// (in_pad: in_features rounded up to even, the pad column zero). A bf16 load of 16 weights is two
// columns of 8, widened in registers by a shift (even column) and a mask (odd column).
//
// The kernel is the GEMM micro-kernel of BLIS and friends: a register tile of tokens x panels, one
// broadcast input feature per token and one weight vector per panel per step, every accumulator an
// FMA chain over the input features in order, stored whole (no horizontal sums, no tails over in).
// A batch takes tiles of 6 tokens (bf16: 5) x 2 panels past a thread's rows, which stay in L2, the
// input features in blocks of up to 512; a decode takes 1 token x 8 panels, the weights straight
// from memory into the FMAs. Every
// (token, output) is the same chain whatever the tile, so a token's result does not depend on the
// batch it comes in.
//
// Thread-safety: the functions are pure functions of their arguments.
#ifndef KVSERVE_KERNELS_CPU_DENSE_PANELS_H_
#define KVSERVE_KERNELS_CPU_DENSE_PANELS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace kvserve::kernels::cpu {

constexpr int kPanelRows = 8;

// True for the types with a panel form (f32, bf16).
bool HasDensePanels(DType dtype);
// Elements (floats, or bf16 halves) of one panel of a matrix with `cols` columns: cols x 8 for
// f32, cols rounded up to even x 8 for bf16.
int64_t DensePanelElems(DType dtype, int64_t cols);
// Bytes of the panel form of a [rows, cols] matrix of dtype (HasDensePanels).
int64_t DensePanelBytes(DType dtype, int64_t rows, int64_t cols);
// w: [rows, cols] of dtype, rows as stored -> out: [DensePanelBytes(dtype, rows, cols)].
void PackDensePanels(const void* w, DType dtype, int64_t rows, int64_t cols, void* out);
// Row `row` of a panel form (DensePanelBytes(dtype, rows, cols) bytes at panels) as fp32: an
// embedding lookup in a table kept as panels.
void DensePanelsRow(const void* panels, DType dtype, int64_t cols, int64_t row, float* out);

struct DensePanelsArgs {
  const void* w;   // the panel form of a [out_features, in_features] matrix of w_dtype
  DType w_dtype;   // kF32 or kBF16
  const float* x;  // [num_tokens, in_features]
  int32_t num_tokens;
  int32_t in_features;
  float* y;  // [num_tokens, out_features]; written, not accumulated into
  int32_t out_features;
};

// y[t, o] for o in [row_begin, row_end) and every token t; row_begin a multiple of kPanelRows.
// Compiled for AVX2 + FMA; call only where ActiveCpuIsa() is at least kAvx2.
void DensePanelsAvx2(const DensePanelsArgs& args, int32_t row_begin, int32_t row_end);

// Output rows per thread-pool item, whole panel pairs: 64 for one token (8 panels, one decode
// tile); 48 for a batch, so the threads finish together on the model's widths (576: 12 items).
inline int64_t DensePanelsPerItem(int32_t num_tokens) { return num_tokens == 1 ? 64 : 48; }

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_DENSE_PANELS_H_
