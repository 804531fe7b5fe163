// Linear layers on 16-bit weights (bf16, f16), computed from the weights as stored: each weight
// chunk is widened to fp32 in registers (F16C vcvtph2ps for f16, a 16-bit shift for bf16) and
// multiplied into fp32 accumulators with FMA (on AVX2, dense_rows.h's register tiles, which
// also compute f32 weights). Where the CPU
// has AVX512-BF16, bf16 weights instead meet x rounded to bf16 (once per call, into a scratch
// buffer that only grows) in vdpbf16ps, which multiplies bf16 pairs and accumulates in fp32: half
// the loads and no widening, at the cost of rounding x to 8 bits of mantissa (relative error
// <= 2^-9 per element).
//
// Kernels per instruction set (cpu_isa.h): half_linear.cc (scalar reference), dense_rows.h (AVX2,
// shared with f32 weights), half_dot_avx512.cc; half_dot_avx2.cc holds the AVX2 conversions. As
// quant_linear.h, this header holds only declarations and plain structs. Thread-safety: the kernels
// are pure functions of their arguments.
#ifndef KVSERVE_KERNELS_CPU_HALF_LINEAR_H_
#define KVSERVE_KERNELS_CPU_HALF_LINEAR_H_

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/dtype.h"

namespace kvserve::kernels {
struct LinearParams;
}  // namespace kvserve::kernels

namespace kvserve::kernels::cpu {

class ThreadPool;

constexpr int kBf16DotChunk = 32;  // bf16 values per vdpbf16ps step

struct HalfRowsArgs {
  const uint16_t* w;       // [out_features, in_features] of bf16 or f16 bits
  const float* x;          // [num_tokens, in_features]
  const uint16_t* x_bf16;  // [num_tokens, x_bf16_stride]: x rounded to bf16, zero-padded to a
                           // multiple of kBf16DotChunk; only the vdpbf16ps kernel reads it
  int64_t x_bf16_stride;
  int32_t num_tokens;
  int32_t in_features;
  float* y;  // [num_tokens, out_features]; rows written, not accumulated into
  int32_t out_features;
};

// Computes y[t, o] for o in [row_begin, row_end) and every token t.
using HalfRowsFn = void (*)(const HalfRowsArgs& args, int32_t row_begin, int32_t row_end);

// The kernel for w_dtype (kBF16 or kF16; nullptr otherwise) per instruction set. Call the SIMD
// ones only where the CPU has them (HalfRowsAvx512Bf16: CpuHasAvx512Bf16()).
HalfRowsFn HalfRowsScalar(DType w_dtype);
HalfRowsFn HalfRowsAvx512(DType w_dtype);
void HalfRowsAvx512Bf16(const HalfRowsArgs& args, int32_t row_begin, int32_t row_end);

// n bf16 (bf16 = true) or f16 values at src (2-byte aligned) widened to f32 (exact, so the same
// bits as the scalar conversion). Where the CPU has AVX2 + F16C; DequantizeRow calls it for the
// 16-bit types (e.g. a KV cache block before attention reads it).
void WidenHalfAvx2(const uint16_t* src, bool bf16, int64_t n, float* dst);
// n floats rounded to f16 (F16C, round to nearest even): FloatToHalf's bits, except that a NaN
// keeps its payload's high bits instead of becoming 0x7E00. Where the CPU has AVX2 + F16C;
// NarrowRow calls it (the KV write).
void NarrowHalfAvx2(const float* src, int64_t n, uint16_t* dst);

// p.y = p.x W^T for p.w_dtype kBF16 or kF16, bias not added, with the kernels of `isa` (REQUIRES:
// isa <= DetectedCpuIsa()). Rows are split over pool (nullptr: calling thread only).
void HalfLinear(const LinearParams& p, ThreadPool* pool, CpuIsa isa);

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_HALF_LINEAR_H_
