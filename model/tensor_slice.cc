#include "model/tensor_slice.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvserve {

std::string TensorSlice::ToString() const {
  const std::string shape = absl::StrCat("[", rows, ", ", cols, "]");
  if (whole()) return absl::StrCat("all of ", shape);
  if (whole_rows())
    return absl::StrCat("rows [", row_begin, ", ", row_begin + num_rows, ") of ", shape);
  return absl::StrCat("rows [", row_begin, ", ", row_begin + num_rows, ") columns [", col_begin,
                      ", ", col_begin + num_cols, ") of ", shape);
}

std::vector<uint8_t> GatherSliceBytes(const uint8_t* data, kernels::DType dtype,
                                      const TensorSlice& slice) {
  const int64_t row_bytes = kernels::RowBytes(dtype, slice.cols);
  const int64_t part_bytes = kernels::RowBytes(dtype, slice.num_cols);
  const int64_t skip_bytes = kernels::RowBytes(dtype, slice.col_begin);
  std::vector<uint8_t> out(static_cast<size_t>(part_bytes * slice.num_rows));
  for (int64_t r = 0; r < slice.num_rows; ++r) {
    std::memcpy(out.data() + r * part_bytes, data + (slice.row_begin + r) * row_bytes + skip_bytes,
                static_cast<size_t>(part_bytes));
  }
  return out;
}

}  // namespace kvserve
