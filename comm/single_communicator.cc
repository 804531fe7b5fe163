#include "comm/single_communicator.h"

#include <cstring>

#include "comm/collective_args.h"

namespace kvserve {

absl::Status SingleCommunicator::AllReduceSum(void* data, int64_t count, kernels::DType dtype) {
  (void)data;
  return comm_internal::CheckAllReduceArgs(count, dtype);
}

absl::Status SingleCommunicator::AllGather(const void* in, void* out, size_t bytes) {
  if (in == out || bytes == 0) return absl::OkStatus();
  if (backend_ != nullptr) {
    backend_->CopyOnDevice(out, in, bytes);
  } else {
    std::memmove(out, in, bytes);
  }
  return absl::OkStatus();
}

absl::Status SingleCommunicator::Broadcast(void* data, size_t bytes, int root) {
  (void)data;
  (void)bytes;
  return comm_internal::CheckRoot(root, 1);
}

}  // namespace kvserve
