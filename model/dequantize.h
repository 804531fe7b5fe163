// Dequantization of GGUF / safetensors tensor encodings to fp32, and the half-precision
// conversions the readers and tests share. Pure functions over caller-owned buffers; thread-safe.
//
// Block layouts (little-endian, 32 elements per block):
//   Q4_0: fp16 d, 16 bytes of nibbles     x[j] = (lo(q[j]) - 8) d,  x[j+16] = (hi(q[j]) - 8) d
//   Q4_1: fp16 d, fp16 m, 16 bytes        x[j] = lo(q[j]) d + m,    x[j+16] = hi(q[j]) d + m
//   Q8_0: fp16 d, 32 int8                 x[j] = q[j] d
// K-quants (256 elements per block):
//   Q4_K: fp16 d, fp16 dmin, 12 bytes packing eight 6-bit (scale, min) pairs, 128 nibble bytes.
//         Sub-block s (32 elements) is x = (d scale_s) q - (dmin min_s); each 64-element chunk
//         takes the low nibbles of 32 bytes for its first sub-block, the high for its second.
//   Q5_K: fp16 d, fp16 dmin, 12 bytes of scales / mins as Q4_K, 32 bytes of high bits, 128 nibble
//         bytes; as Q4_K with a fifth bit: element l of 64-element chunk c takes bit 2c of
//         qh[l] (first sub-block) or bit 2c + 1 (second).
//   Q6_K: 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 int8 scales, fp16 d;
//         x = (d scale_{i/16}) (q - 32) with q the 6-bit value.
#ifndef KVSERVE_MODEL_DEQUANTIZE_H_
#define KVSERVE_MODEL_DEQUANTIZE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/dtype.h"
#include "model/gguf_file.h"
#include "model/tensor_slice.h"

namespace kvserve {

// IEEE binary16 and bfloat16 <-> fp32: one copy of each rounding rule, in kernels/dtype.h.
using kernels::BFloat16ToFloat;
using kernels::FloatToBFloat16;
using kernels::FloatToHalf;
using kernels::HalfToFloat;

// Writes `num_elements` floats decoded from `data` (`num_bytes` bytes of `type`) into `out`.
// INVALID_ARGUMENT when the type is unsupported, num_elements is not a whole number of blocks,
// or num_bytes is not exactly the size those blocks take.
// REQUIRES: out has room for num_elements floats.
absl::Status Dequantize(GgmlType type, const uint8_t* data, uint64_t num_bytes,
                        int64_t num_elements, float* out);

// Decodes only `slice` of a stored [slice.rows, slice.cols] tensor into out [num_rows,
// num_cols]: each row's part alone when it falls on block boundaries, otherwise the whole row
// (a block cannot be decoded in part) and then its part. INVALID_ARGUMENT when the type is
// unsupported, cols is not a whole number of blocks, num_bytes is not what the tensor takes, or
// the slice is outside it. REQUIRES: out has room for slice.num_elements() floats.
absl::Status DequantizeSlice(GgmlType type, const uint8_t* data, uint64_t num_bytes,
                             const TensorSlice& slice, float* out);

// One tensor (or the part of it a tensor-parallel rank holds) to decode into an owned vector
// (resized by DequantizeAll).
struct DequantizeJob {
  std::string name;  // for error messages
  GgmlType type;
  const uint8_t* data;  // [num_bytes]
  uint64_t num_bytes;
  int64_t num_elements;     // of the whole tensor
  std::vector<float>* out;  // resized to num_elements, or to slice->num_elements()
  std::optional<TensorSlice> slice = std::nullopt;  // decode only this part; nullopt: all
};

// Runs every job, splitting them by size over `num_threads` threads (1: the calling thread only).
// Returns the first failure, naming the tensor. Outputs of failed runs are unspecified.
absl::Status DequantizeAll(const std::vector<DequantizeJob>& jobs, int num_threads);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_DEQUANTIZE_H_
