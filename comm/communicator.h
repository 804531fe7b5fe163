// Communicator: the collectives a tensor-parallel worker group needs, over one group of `size`
// ranks (docs/architecture.md, "Tensor parallelism"). Implementations:
//   - single rank (comm/single_communicator.h): every call is a no-op or a copy, so TP = 1 runs
//     the same model code with no branch;
//   - Gloo (comm/gloo_communicator.h: CPU ranks, host buffers, TCP between processes or hosts);
//   - NCCL (comm/nccl/nccl_communicator.h: CUDA ranks, device buffers, on the backend's stream),
//     built into the CUDA module.
// Both multi-rank factories take comm/comm_options.h's CommOptions and find the other ranks
// through the leader's address alone (comm/rendezvous.h).
//
// Buffers live where the rank's Backend keeps its tensors (host memory for Gloo and the single
// rank, device memory for NCCL). Every call is collective: every rank of the group makes the
// same calls in the same order with the same sizes, or the group hangs until `timeout`.
//
// Errors: a collective that does not complete within the group's timeout returns
// DEADLINE_EXCEEDED; a peer that is gone (its connection closed) returns UNAVAILABLE. After such
// an error the communicator is unusable (every later call returns the same error): the group
// stops, as a failed engine does. A bad argument (a dtype other than f32 / bf16, a root out of
// range) is INVALID_ARGUMENT on the calling rank only and leaves the communicator usable.
//
// Thread-safety: one call at a time (the engine thread of the rank owns it).
#ifndef KVSERVE_COMM_COMMUNICATOR_H_
#define KVSERVE_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/dtype.h"

namespace kvserve {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "single", "gloo", "nccl"

  // data[i] = sum over ranks of data[i], in place. dtype: kF32 or kBF16 (bf16 summed in fp32
  // and rounded once per element where the implementation can).
  virtual absl::Status AllReduceSum(void* data, int64_t count, kernels::DType dtype) = 0;
  // out = concat over ranks r of in(r), each `bytes` long: out holds size() * bytes.
  virtual absl::Status AllGather(const void* in, void* out, size_t bytes) = 0;
  // data (bytes long) on every rank = data on rank `root`.
  virtual absl::Status Broadcast(void* data, size_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // Called from another thread (the group's watchdog) when the group is known to be broken (a
  // rank died): ends what this rank waits for without a call of its own to time out, e.g. a
  // replayed CUDA graph whose NCCL kernels wait on the dead peer (ncclCommAbort). Later calls
  // fail. A call in flight that polls with its own deadline is left to it. The default does
  // nothing: Gloo and the single rank wait only inside calls, each under the group's timeout.
  // Thread-safe, unlike the collectives.
  virtual void Abort() {}
};

}  // namespace kvserve

#endif  // KVSERVE_COMM_COMMUNICATOR_H_
