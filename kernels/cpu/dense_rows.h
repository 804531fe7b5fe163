// Linear layers on dense weights (f32, bf16, f16 rows as stored) on AVX2 + FMA (+ F16C): the
// kernel behind cpu::Linear for f32 weights left as rows (not packed into dense_panels.h's form:
// KVSERVE_CPU_PACK=0), and HalfLinear's AVX2 path for f16 and unpacked bf16.
//
// Register tiles of output rows x tokens, so every weight vector loaded serves all the tile's
// tokens and every token vector all its rows; each (row, token) pair is FMA chains over
// in_features (16-bit weights widened in registers: vcvtph2ps for f16, a zero-extend and 16-bit
// shift for bf16), summed, HorizontalSum, then the scalar tail. f32: one chain, 4 rows x 1 token
// for a decode, 3 x 4 for a batch. 16-bit weights: two chains over alternate 8-weight slices,
// one row at a time for a decode (a short 16-bit row streams fastest alone, the two chains hiding
// the FMA latency), 3 x 2 for a batch (12 accumulators). The same operations for a token alone
// (decode) and in any batch (prefill), so a token's result does not depend on the batch it comes
// in.
//
// Declarations only; dense_rows_avx2.cc is compiled for AVX2 and runs where ActiveCpuIsa() is at
// least kAvx2. Thread-safety: the kernel is a pure function of its arguments.
#ifndef KVSERVE_KERNELS_CPU_DENSE_ROWS_H_
#define KVSERVE_KERNELS_CPU_DENSE_ROWS_H_

#include <cstdint>

#include "kernels/dtype.h"

namespace kvserve::kernels::cpu {

struct DenseRowsArgs {
  const void* w;  // [out_features, in_features] of w_dtype (kF32, kBF16 or kF16)
  DType w_dtype;
  const float* x;  // [num_tokens, in_features]
  int32_t num_tokens;
  int32_t in_features;
  float* y;  // [num_tokens, out_features]; rows written, not accumulated into
  int32_t out_features;
};

// Computes y[t, o] for o in [row_begin, row_end) and every token t, in blocks of rows that stay
// in L2 while the tokens stream past them a batch tile at a time.
void DenseRowsAvx2(const DenseRowsArgs& args, int32_t row_begin, int32_t row_end);

// Output rows per thread-pool item: 64 for one token (each thread reads a few long runs of W,
// which the prefetchers follow); for a batch, whose items are long, 48 (whole 3-row tiles), so the
// threads finish together on the model's widths (576 outputs: 12 items, where 9 of 64 rows leave
// one thread a fifth of the work alone; 192: 4).
inline int64_t DenseRowsPerItem(int32_t num_tokens) { return num_tokens == 1 ? 64 : 48; }

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_DENSE_ROWS_H_
