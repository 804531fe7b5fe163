// TensorSlice: the part of a stored row-major [rows, cols] tensor that one tensor-parallel rank
// reads (model/tensor_parallel.h): a range of rows (column-parallel layers: contiguous bytes in
// the file) or a range of columns (row-parallel layers: a piece of every row, gathered row by
// row). A vector [n] is a [1, n] tensor. Plain value; the functions are pure and thread-safe.
#ifndef KVSERVE_MODEL_TENSOR_SLICE_H_
#define KVSERVE_MODEL_TENSOR_SLICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace kvserve {

struct TensorSlice {
  int64_t rows = 0;  // the stored tensor is [rows, cols]
  int64_t cols = 0;
  int64_t row_begin = 0;  // the part: rows [row_begin, row_begin + num_rows)
  int64_t num_rows = 0;
  int64_t col_begin = 0;  // and columns [col_begin, col_begin + num_cols)
  int64_t num_cols = 0;

  static TensorSlice Whole(int64_t rows, int64_t cols) {
    return TensorSlice{rows, cols, 0, rows, 0, cols};
  }
  bool whole() const { return num_rows == rows && num_cols == cols; }
  // Every row's part is the whole row, so the part is contiguous in the file.
  bool whole_rows() const { return num_cols == cols; }
  int64_t num_elements() const { return num_rows * num_cols; }
  // Each row's part starts and ends on a boundary of blocks of `block_elements` values.
  bool OnBlockBoundaries(int64_t block_elements) const {
    return col_begin % block_elements == 0 && num_cols % block_elements == 0;
  }
  // "rows [8, 16) of [32, 64)" / "columns [0, 16) of [32, 64)" / "all of [32, 64)".
  std::string ToString() const;
};

// The bytes of `slice` of a stored [slice.rows, slice.cols] matrix of `dtype` at `data`, row by
// row: [num_rows, num_cols] of dtype. REQUIRES: the slice lies inside the tensor and
// slice.OnBlockBoundaries(block_elements of dtype).
std::vector<uint8_t> GatherSliceBytes(const uint8_t* data, kernels::DType dtype,
                                      const TensorSlice& slice);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_TENSOR_SLICE_H_
