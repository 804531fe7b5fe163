// The one place where an absl::Status becomes a grpc::Status. Every service method of the worker
// works with absl::Status inside and converts on the way out through ToGrpcStatus.
//
// The canonical codes are the same numbers in both libraries, so the code is carried over as is
// and the message unchanged; an OK status becomes grpc::Status::OK.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_API_STATUS_CONVERSION_H_
#define KVSERVE_API_STATUS_CONVERSION_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace kvserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

// The reverse, for clients inside the project (load generator, tests).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace kvserve

#endif  // KVSERVE_API_STATUS_CONVERSION_H_
