// SingleCommunicator: the group of one rank (tensor parallelism off). AllReduceSum and Barrier
// do nothing, Broadcast from rank 0 leaves the data as it is, AllGather copies `in` to `out`,
// so TP = 1 runs the same model code as a sharded group, with no branch.
//
// Buffers: host memory, or the memory of `backend` when one is given (AllGather copies through
// Backend::CopyOnDevice then, so the same object serves a CUDA rank). Never fails except on an
// argument no group could take (a dtype other than f32 / bf16, a root other than 0).
// Thread-safety: none needed (no state); one call at a time, as for every Communicator.
#ifndef KVSERVE_COMM_SINGLE_COMMUNICATOR_H_
#define KVSERVE_COMM_SINGLE_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "kernels/kernels.h"

namespace kvserve {

class SingleCommunicator final : public Communicator {
 public:
  // backend: where the buffers live (not owned; must outlive this); nullptr: host memory.
  explicit SingleCommunicator(kernels::Backend* backend = nullptr) : backend_(backend) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "single"; }

  absl::Status AllReduceSum(void* data, int64_t count, kernels::DType dtype) override;
  absl::Status AllGather(const void* in, void* out, size_t bytes) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  kernels::Backend* const backend_;
};

}  // namespace kvserve

#endif  // KVSERVE_COMM_SINGLE_COMMUNICATOR_H_
