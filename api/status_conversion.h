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

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvserve {

grpc::Status ToGrpcStatus(const absl::Status& status);

// The reverse, for clients inside the project (load generator, tests).
absl::Status FromGrpcStatus(const grpc::Status& status);

// The field a refusal names: the message's leading "path: " (e.g. "sampling.max_tokens" in
// "sampling.max_tokens: the request needs ..."); nullopt when it names none.
std::optional<std::string> LeadingFieldPath(absl::string_view message);

// A RESOURCE_EXHAUSTED that names no field: the server's capacity refused the request (a full
// waiting queue), so the same request may be taken later. One that names a field is the request's
// own (longer than the context window, more KV blocks than the pool holds) and never will be.
bool IsCapacityRefusal(const absl::Status& status);

}  // namespace kvserve

#endif  // KVSERVE_API_STATUS_CONVERSION_H_
