#include "model/dequantize.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_backend.h"

namespace kvserve {

absl::Status Dequantize(GgmlType type, const uint8_t* data, uint64_t num_bytes,
                        int64_t num_elements, float* out) {
  int64_t block_elements = 0, block_bytes = 0;
  if (!GgmlTypeBlock(type, &block_elements, &block_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot dequantize tensor type ", GgmlTypeName(type)));
  }
  if (num_elements < 0 || num_elements % block_elements != 0) {
    return absl::InvalidArgumentError(absl::StrCat(num_elements, " elements of ",
                                                   GgmlTypeName(type), " is not a whole number of ",
                                                   block_elements, "-element blocks"));
  }
  const int64_t num_blocks = num_elements / block_elements;
  if (num_bytes != static_cast<uint64_t>(num_blocks) * static_cast<uint64_t>(block_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(num_elements, " elements of ", GgmlTypeName(type), " take ",
                     num_blocks * block_bytes, " bytes, got ", num_bytes));
  }
  kernels::cpu::DequantizeRow(data, *GgmlToDType(type), num_elements, out);
  return absl::OkStatus();
}

absl::Status DequantizeSlice(GgmlType type, const uint8_t* data, uint64_t num_bytes,
                             const TensorSlice& slice, float* out) {
  int64_t block_elements = 0, block_bytes = 0;
  if (!GgmlTypeBlock(type, &block_elements, &block_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot dequantize tensor type ", GgmlTypeName(type)));
  }
  if (slice.rows < 0 || slice.cols < 0 || slice.cols % block_elements != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows of ", slice.cols, " elements of ", GgmlTypeName(type),
                     " are not a whole number of ", block_elements, "-element blocks"));
  }
  const int64_t row_bytes = slice.cols / block_elements * block_bytes;
  if (num_bytes != static_cast<uint64_t>(slice.rows) * static_cast<uint64_t>(row_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", slice.rows, ", ", slice.cols, "] of ", GgmlTypeName(type), " takes ",
                     slice.rows * row_bytes, " bytes, got ", num_bytes));
  }
  if (slice.row_begin < 0 || slice.num_rows < 0 || slice.row_begin + slice.num_rows > slice.rows ||
      slice.col_begin < 0 || slice.num_cols < 0 || slice.col_begin + slice.num_cols > slice.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice ", slice.ToString(), " is outside the tensor"));
  }
  const kernels::DType dtype = *GgmlToDType(type);
  const bool on_blocks = slice.OnBlockBoundaries(block_elements);
  std::vector<float> whole_row(on_blocks ? 0 : static_cast<size_t>(slice.cols));
  for (int64_t r = 0; r < slice.num_rows; ++r) {
    const uint8_t* row = data + (slice.row_begin + r) * row_bytes;
    float* dst = out + r * slice.num_cols;  // [num_cols]
    if (on_blocks) {
      kernels::cpu::DequantizeRow(row + slice.col_begin / block_elements * block_bytes, dtype,
                                  slice.num_cols, dst);
    } else {
      kernels::cpu::DequantizeRow(row, dtype, slice.cols, whole_row.data());
      std::copy_n(whole_row.data() + slice.col_begin, slice.num_cols, dst);
    }
  }
  return absl::OkStatus();
}

absl::Status DequantizeAll(const std::vector<DequantizeJob>& jobs, int num_threads) {
  num_threads = std::max(1, std::min<int>(num_threads, static_cast<int>(jobs.size())));
  // Largest first, each to the least-loaded thread: balanced enough for a model's tensors.
  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return jobs[a].num_elements > jobs[b].num_elements; });
  std::vector<std::vector<size_t>> assigned(num_threads);
  std::vector<int64_t> load(num_threads, 0);
  for (size_t index : order) {
    const int t = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    assigned[t].push_back(index);
    load[t] += jobs[index].num_elements + 1;
  }
  std::vector<absl::Status> status(num_threads);
  auto work = [&](int t) {
    for (size_t index : assigned[t]) {
      const DequantizeJob& job = jobs[index];
      absl::Status s;
      if (job.slice.has_value()) {
        job.out->resize(static_cast<size_t>(job.slice->num_elements()));
        s = DequantizeSlice(job.type, job.data, job.num_bytes, *job.slice, job.out->data());
      } else {
        job.out->resize(static_cast<size_t>(job.num_elements));
        s = Dequantize(job.type, job.data, job.num_bytes, job.num_elements, job.out->data());
      }
      if (!s.ok()) {
        status[t] = absl::Status(s.code(), absl::StrCat(job.name, ": ", s.message()));
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < num_threads; ++t) threads.emplace_back(work, t);
  work(0);
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kvserve
