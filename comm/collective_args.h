// Argument checks every Communicator shares (the single rank, Gloo, and NCCL in the CUDA
// module), so that each refuses a bad call with the same message: INVALID_ARGUMENT naming the
// value. Inline, so the CUDA module needs no part of kvserve_comm.
#ifndef KVSERVE_COMM_COLLECTIVE_ARGS_H_
#define KVSERVE_COMM_COLLECTIVE_ARGS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace kvserve::comm_internal {

// AllReduceSum takes f32 and bf16 and a count >= 0.
inline absl::Status CheckAllReduceArgs(int64_t count, kernels::DType dtype) {
  if (dtype != kernels::DType::kF32 && dtype != kernels::DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllReduceSum takes f32 or bf16, not ", kernels::DTypeName(dtype)));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllReduceSum of a negative count ", count));
  }
  return absl::OkStatus();
}

// Broadcast's root must be a rank of a group of `size`.
inline absl::Status CheckRoot(int root, int size) {
  if (root < 0 || root >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Broadcast root ", root, " is not a rank of a group of ", size));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::comm_internal

#endif  // KVSERVE_COMM_COLLECTIVE_ARGS_H_
