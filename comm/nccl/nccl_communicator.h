// The NCCL communicator: the collectives of a group of CUDA ranks on device buffers, enqueued
// on the rank's CudaBackend stream. Its code lives in the CUDA module (kernels/cuda/
// nccl_communicator.h); this factory, in kvserve_comm, runs the rendezvous on the CPU, passes
// rank 0's ncclUniqueId to the others through the store, and reaches the module through dlopen
// (kernels::OpenCudaModule), so a CPU process never loads NCCL.
//
// Timeouts: the group must form within options.connect_timeout (NCCL's nonblocking init, polled
// and aborted past it: DEADLINE_EXCEEDED); each collective must complete within
// options.timeout, for which each call waits until its work on the stream is done (polling the
// stream and NCCL's asynchronous error; ncclCommAbort past the timeout: DEADLINE_EXCEEDED;
// UNAVAILABLE when NCCL reports a remote or system error). While the stream is being captured
// into a CUDA graph, a call only enqueues (the graph's replay is then the caller's to watch).
// After an error every later call returns it. Thread-safety: one call at a time.
#ifndef KVSERVE_COMM_NCCL_NCCL_COMMUNICATOR_H_
#define KVSERVE_COMM_NCCL_NCCL_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/comm_options.h"
#include "comm/communicator.h"
#include "kernels/kernels.h"

namespace kvserve {

// backend: the rank's CUDA backend (kernels::CreateBackend("cuda:N")); not owned, must
// outlive the communicator. Errors: INVALID_ARGUMENT for another backend or bad options,
// FAILED_PRECONDITION when the CUDA module or its NCCL entry points cannot be loaded, then as
// Rendezvous::Join and the timeouts above. options.hostname and interface are not used (NCCL
// chooses its own transport; NCCL_SOCKET_IFNAME steers it).
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommOptions& options,
                                                                     kernels::Backend* backend);

}  // namespace kvserve

#endif  // KVSERVE_COMM_NCCL_NCCL_COMMUNICATOR_H_
