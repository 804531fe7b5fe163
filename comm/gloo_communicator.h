// The Gloo communicator: the collectives of a group of CPU ranks over TCP (libgloo's tcp
// transport), between threads, processes or hosts. Buffers are host memory.
//
// CreateGlooCommunicator joins the group through the leader's rendezvous store
// (comm/rendezvous.h), connects every pair of ranks (a full mesh of TCP connections) and ends
// with a barrier, after which rank 0 stops the store it started. Collectives:
//   AllReduceSum  f32 summed in fp32; bf16 widened into an fp32 scratch buffer, summed, and
//                 rounded back once per element (kernels/dtype.h's rule);
//   AllGather, Broadcast (any root), Barrier.
// Every collective is bounded by options.timeout: DEADLINE_EXCEEDED past it; UNAVAILABLE when a
// peer's connection broke (it died). After such an error the communicator returns that error
// from every later call. A bad argument (a dtype other than f32 / bf16, a root out of range) is
// INVALID_ARGUMENT on the calling rank only; the others then time out.
//
// Process-wide effect: SIGPIPE is set to be ignored when its disposition is the default, since
// Gloo writes to its sockets with writev(2) and a dead peer would otherwise kill this process.
// Thread-safety: one call at a time, as for every Communicator.
#ifndef KVSERVE_COMM_GLOO_COMMUNICATOR_H_
#define KVSERVE_COMM_GLOO_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/comm_options.h"
#include "comm/communicator.h"

namespace kvserve {

// Blocks until every rank of the group has joined (or options.connect_timeout). Errors: as
// Rendezvous::Join, plus UNAVAILABLE when the ranks cannot connect to each other.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_COMM_GLOO_COMMUNICATOR_H_
