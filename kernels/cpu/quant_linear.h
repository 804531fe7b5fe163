// Linear layers on GGUF block-quantized weights (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), computed
// from the weights as stored: the activations are quantized once per call to int8 in 32-element
// blocks (ActBlock), then every 32-element (sub-)block of a weight row is an integer dot product
// with the matching activation block, scaled and accumulated in fp32. A K-quant super-block of
// 256 is 8 such sub-blocks, so one activation format serves every type.
//
// Error: each activation x_i is replaced by d q_i with |x_i - d q_i| <= d / 2, d = max|x| / 127
// over its block, so |y - x W^T| <= sum over blocks of (d / 2) sum |w_i| (plus fp32 rounding).
//
// Kernels come per instruction set (cpu_isa.h): quant_dot_scalar.cc (reference, any CPU),
// quant_dot_avx2.cc (AVX2 maddubs), quant_dot_avx512.cc (AVX-512 VNNI vpdpbusd). Each computes
// output rows [row_begin, row_end) for all tokens, reading each weight block once per group of
// up to four tokens while it sits in registers (their choice by weight type and their row loop:
// quant_dispatch.h). QuantLinear quantizes x into a scratch buffer that only grows (thread_local
// of the calling thread) and splits rows over the pool.
//
// This header is included by the files compiled with -mavx2 / -mavx512*: it holds only
// declarations and plain structs, and those files call no inline function of a shared header (an
// inline function compiled there could be the copy the linker keeps for the whole program, and
// fault on an older CPU).
// Thread-safety: the kernels are pure functions of their arguments.
#ifndef KVSERVE_KERNELS_CPU_QUANT_LINEAR_H_
#define KVSERVE_KERNELS_CPU_QUANT_LINEAR_H_

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/dtype.h"

namespace kvserve::kernels {
struct LinearParams;
}  // namespace kvserve::kernels

namespace kvserve::kernels::cpu {

class ThreadPool;

constexpr int kActBlock = 32;  // activation elements per ActBlock

// 32 activations as d * q[i]; s = d * sum(q) (what the min / offset terms of Q4_0, Q4_1, Q4_K
// and Q5_K multiply).
struct ActBlock {
  float d;
  float s;
  int8_t q[kActBlock];
};
static_assert(sizeof(ActBlock) == 40);

struct QuantRowsArgs {
  const uint8_t* w;    // [out_features, row_bytes]: rows of GGUF blocks
  int64_t row_bytes;   // RowBytes(w_dtype, in_features)
  int32_t num_blocks;  // in_features / 32: ActBlocks per token row
  const ActBlock* x;   // [num_tokens, num_blocks]
  int32_t num_tokens;
  float* y;  // [num_tokens, out_features]; rows written, not accumulated into
  int32_t out_features;
};

// Computes y[t, o] for o in [row_begin, row_end) and every token t.
using QuantRowsFn = void (*)(const QuantRowsArgs& args, int32_t row_begin, int32_t row_end);

// The tiled AVX-512 kernel (quant_tile_avx512.cc) for Q8_0, Q4_0, Q4_1, Q4_K and Q5_K: every
// weight is an unsigned byte u with w = dw * u + off per 32-element block (Q8_0: u = w + 128,
// off = -128 dw), so a block's product with activation block a is
//   dw * a.d * sum(u[i] * a.q[i]) + off * a.s.
// A tile of up to kQuantTileRows rows is decoded once into scratch (WeightPair), then multiplied
// with every token in groups of up to 6, each weight pair and activation pair loaded once per tile:
// the integer dots go through vpdpbusd and the scaled sums into one 16-lane fp32 accumulator per
// (row, token); the offset terms are a float dot of the row's offsets with the token's block
// sums, added at the end. Every (row, token) sees the same operations in the same order whatever
// the tile, the token count or the thread: a token's result does not depend on its batch (which
// migration and preemption rely on: a recomputed prefix gives the KV its decode steps wrote).

// Two consecutive 32-element activation blocks (2p, 2p + 1) of one token; each lane's scale
// (lanes 0-7 block 2p, 8-15 block 2p + 1). A block past the row's end is zero.
struct alignas(64) ActPair {
  int8_t q[2 * kActBlock];
  float d[16];
};
// Two consecutive weight blocks of one row, decoded: u as above, dw per lane.
struct alignas(64) WeightPair {
  uint8_t u[2 * kActBlock];
  float dw[16];
};

struct QuantTileArgs {
  const uint8_t* w;     // [out_features, row_bytes]: rows of GGUF blocks
  int64_t row_bytes;    // RowBytes(w_dtype, in_features)
  int32_t num_blocks;   // in_features / 32
  int32_t num_pairs;    // (num_blocks + 1) / 2
  int32_t sums_stride;  // num_blocks rounded up to 16
  const ActPair* x;     // [num_tokens, num_pairs]
  const float* x_sums;  // [num_tokens, sums_stride]: a.s per block, zero past num_blocks
  int32_t num_tokens;
  float* y;  // [num_tokens, out_features]; rows written, not accumulated into
  int32_t out_features;
};

constexpr int kQuantTileRows = 4;  // rows decoded together into a thread's scratch

// Scratch of one thread for QuantTileFn: a tile's rows of decoded pairs and offsets.
struct QuantTileScratch {
  WeightPair* pairs;  // [kQuantTileRows, num_pairs]
  float* offsets;     // [kQuantTileRows, sums_stride]
};

using QuantTileFn = void (*)(const QuantTileArgs& args, int32_t row_begin, int32_t row_end,
                             const QuantTileScratch& scratch);

// The tiled kernel of `w_dtype`, or nullptr for a type it does not cover (Q6_K: its 16-element
// scales need per-16 activation sums for the offset form; it stays on QuantRowsAvx512). Call
// only where DetectedCpuIsa() is kAvx512.
QuantTileFn QuantTileAvx512(DType w_dtype);

// The activation form of QuantTileFn from quantized activations.
void PackActivationPairs(const ActBlock* blocks /* [num_tokens, num_blocks] */, int32_t num_tokens,
                         int32_t num_blocks, ActPair* pairs /* [num_tokens, num_pairs] */,
                         float* sums /* [num_tokens, sums_stride] */, int32_t sums_stride);

// The packed form of a Q8_0, Q4_0 or Q4_1 matrix (PackQuantRows), which the packed AVX2 and
// AVX-512 kernels read without decoding: the rows in tiles of kPackRows (the last tile padded with
// zero rows), each tile its blocks in order, and each such tile block the 16 rows' block transposed
// so that one 64-byte load holds the same 4 bytes of every row (lane r = row r):
//   Q8_0  u = q + 128 [8][16 x 4] (512 B), then d [16] fp16                      544 B
//   Q4_0  the nibble bytes [4][16 x 4] (256 B; byte j holds elements j and
//         j + 16, as stored), then d [16] fp16                                    288 B
//   Q4_1  as Q4_0, then m [16] fp16                                                320 B
// That is the stored bytes rearranged, so the packed matrix is no larger than the file's (plus
// the padding of the last tile). Every block then computes as the tiled kernel computes it (the
// AVX2 kernel reads each 64-byte group as two 32-byte halves of 8 rows):
//   acc = fma(float(sum(u[i] * a.q[i])), dw * a.d, acc); acc = fma(off, a.s, acc)
// per (row, token), blocks in order, off = -128 dw (Q8_0), -8 dw (Q4_0) or m (Q4_1).
constexpr int kPackRows = 16;
// The parts of a tile block, in bytes: the weights, then one fp16 per row for d (and for m).
constexpr int kPackedQ8WeightBytes = 8 * 64;  // Q8_0: u [8][16 x 4]
constexpr int kPackedQ4WeightBytes = 4 * 64;  // Q4_0, Q4_1: nibble bytes [4][16 x 4]
constexpr int kPackedHalvesBytes = 2 * kPackRows;
// A whole tile block of each type (the table above).
constexpr int kPackedQ8_0BlockBytes = kPackedQ8WeightBytes + kPackedHalvesBytes;
constexpr int kPackedQ4_0BlockBytes = kPackedQ4WeightBytes + kPackedHalvesBytes;
constexpr int kPackedQ4_1BlockBytes = kPackedQ4WeightBytes + 2 * kPackedHalvesBytes;

// True for the types PackQuantRows takes.
bool IsPackableQuantType(DType w_dtype);
// Bytes of the packed form of a [rows, cols] matrix; 0 when w_dtype is not packable or cols is
// not a multiple of 32.
int64_t PackedQuantBytes(DType w_dtype, int64_t rows, int64_t cols);
// w: [rows, RowBytes(w_dtype, cols)] as stored -> out: [PackedQuantBytes(w_dtype, rows, cols)].
void PackQuantRows(const uint8_t* w, DType w_dtype, int64_t rows, int64_t cols, uint8_t* out);

// Computes what QuantRowsFn does from a packed matrix (args.w; args.row_bytes unused).
// REQUIRES: row_begin is a multiple of kPackRows.
using QuantPackedFn = QuantRowsFn;
// The reference (plain C++), the AVX2 (maddubs) and the AVX-512 VNNI kernels, all with the same
// arithmetic bit for bit; nullptr for a type that is not packable. Call the AVX2 / AVX-512 ones
// only where DetectedCpuIsa() reaches them.
QuantPackedFn QuantPackedScalar(DType w_dtype);
QuantPackedFn QuantPackedAvx2(DType w_dtype);
QuantPackedFn QuantPackedAvx512(DType w_dtype);

// The kernel of `w_dtype` for each instruction set; nullptr for a type that is not block
// quantized. Call the AVX2 / AVX-512 ones only where DetectedCpuIsa() reaches them.
QuantRowsFn QuantRowsScalar(DType w_dtype);
QuantRowsFn QuantRowsAvx2(DType w_dtype);
QuantRowsFn QuantRowsAvx512(DType w_dtype);

// The 6-bit scales and mins of the eight 32-element sub-blocks of a Q4_K / Q5_K super-block,
// from the 12 bytes that pack them: sub-blocks 0-3 keep theirs in the low 6 bits of bytes j and
// j + 4; sub-blocks 4-7 in the nibbles of byte j + 4, with the top two bits in the spare high
// bits of bytes j - 4 and j. (Defined in quant_dot_scalar.cc; shared by every decoder.)
void UnpackKScalesMins(const uint8_t* packed /* [12] */, uint8_t* scales /* [8] */,
                       uint8_t* mins /* [8] */);

// Quantizes num_tokens rows of in_features floats. REQUIRES: in_features % 32 == 0. The AVX2 /
// AVX-512 versions give the same bits (the same max, product and round-to-nearest-even).
void QuantizeActivations(const float* x /* [num_tokens, in_features] */, int32_t num_tokens,
                         int32_t in_features, ActBlock* out /* [num_tokens, in_features / 32] */);
void QuantizeActivationsAvx2(const float* x, int32_t num_tokens, int32_t in_features,
                             ActBlock* out);
void QuantizeActivationsAvx512(const float* x, int32_t num_tokens, int32_t in_features,
                               ActBlock* out);

// p[i].y = p[i].x W_i^T for block-quantized weights, bias not added, with the kernels of `isa`
// (REQUIRES: isa <= DetectedCpuIsa(); every p[i] has the same x, num_tokens and in_features).
// A p[i] with w_packed reads the packed form (PackQuantRows), through the packed kernel of isa.
// x is quantized once, and the rows of all count products are split over pool as one loop
// (nullptr: calling thread only).
void QuantLinear(const LinearParams* p, int count, ThreadPool* pool, CpuIsa isa);

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_QUANT_LINEAR_H_
