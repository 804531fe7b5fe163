// NcclCommunicator: the Communicator of a CUDA rank (comm/communicator.h) over NCCL, on device
// buffers, enqueued on the CudaBackend's stream. Part of the CUDA module; made through the
// module's entry points (comm/nccl/nccl_module_abi.h) by comm/nccl/nccl_communicator.h's factory,
// which runs the rendezvous and hands over rank 0's ncclUniqueId.
//
// The communicator is nonblocking (ncclConfig_t::blocking = 0), so nothing waits inside NCCL:
// Create polls the group's formation until `init_timeout`, each call polls its issue and then
// its completion (an event after it on the stream) until `timeout`, watching
// ncclCommGetAsyncError; past the timeout the communicator is aborted (ncclCommAbort) and the
// call is DEADLINE_EXCEEDED; a remote or system error is UNAVAILABLE. After an error every
// later call returns it. While the stream is being captured into a graph a call only enqueues.
// AllReduceSum: f32 in fp32; bf16 by NCCL in bf16 (rounded at each reduction step, not once).
// Barrier: an all-reduce of one float, waited for.
// Thread-safety: one call at a time, on a thread whose current device is the backend's (Create
// and every call set it); Abort from any thread.
#ifndef KVSERVE_COMM_NCCL_CUDA_NCCL_COMMUNICATOR_H_
#define KVSERVE_COMM_NCCL_CUDA_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "kernels/cuda/cuda_backend.h"

namespace kvserve::kernels::cuda {

class NcclCommunicator final : public Communicator {
 public:
  using Clock = std::chrono::steady_clock;

  // Joins rank `rank` of `size` to the group of `id` on backend's device. Errors:
  // DEADLINE_EXCEEDED when the group has not formed within init_timeout, UNAVAILABLE or
  // INTERNAL for NCCL or CUDA failures (named).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      CudaBackend* backend, int rank, int size, const ncclUniqueId& id,
      std::chrono::milliseconds init_timeout, std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }

  absl::Status AllReduceSum(void* data, int64_t count, DType dtype) override;
  absl::Status AllGather(const void* in, void* out, size_t bytes) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;
  // ncclCommAbort unless a call is in flight (it holds call_mu_ and aborts at its own deadline):
  // what ends a graph replay's wait on a dead peer.
  void Abort() override;

 private:
  NcclCommunicator(CudaBackend* backend, ncclComm_t comm, int rank, int size, int device,
                   cudaEvent_t done, float* barrier_value, std::chrono::milliseconds timeout)
      : backend_(backend),
        comm_(comm),
        rank_(rank),
        size_(size),
        device_(device),
        done_(done),
        barrier_value_(barrier_value),
        timeout_(timeout) {}

  // Issues `call` on the backend's current stream and waits until it has run (unless the
  // stream is capturing). Remembers a failure in failed_ and aborts the communicator.
  absl::Status Run(const std::string& what, const std::function<ncclResult_t(cudaStream_t)>& call);
  // Polls until NCCL has issued the last call (no longer ncclInProgress) or `deadline`.
  absl::Status WaitIssued(const std::string& what, ncclResult_t result, Clock::time_point deadline);
  // Polls until the work enqueued on `stream` so far has run, or `deadline`.
  absl::Status WaitDone(const std::string& what, cudaStream_t stream, Clock::time_point deadline);
  absl::Status Fail(absl::Status status);

  CudaBackend* const backend_;
  // Held by every collective for its whole call, so that Abort never frees comm_ under one.
  std::mutex call_mu_;
  ncclComm_t comm_;  // owned; nullptr once aborted
  const int rank_;
  const int size_;
  const int device_;
  cudaEvent_t done_;      // owned: recorded after each call, polled for its completion
  float* barrier_value_;  // owned: one device float for Barrier
  const std::chrono::milliseconds timeout_;
  absl::Status failed_;
};

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_COMM_NCCL_CUDA_NCCL_COMMUNICATOR_H_
