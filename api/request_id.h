// The request id on gRPC: a call may send its id as "x-request-id" metadata (the gRPC form of
// HTTP's X-Request-Id header), and every server returns the id it used in its initial metadata
// under the same key. The router sends its client's id to the worker this way, so both log the
// request under one id.
//
// Thread-safety: plain functions.
#ifndef KVSERVE_API_REQUEST_ID_H_
#define KVSERVE_API_REQUEST_ID_H_

#include <grpcpp/grpcpp.h>

#include "absl/strings/string_view.h"

namespace kvserve {

inline constexpr char kRequestIdMetadata[] = "x-request-id";

// The call's x-request-id metadata; "" when it sent none. Valid while the call is.
inline absl::string_view RequestIdOf(const grpc::ServerContextBase& call) {
  const auto& metadata = call.client_metadata();
  auto it = metadata.find(kRequestIdMetadata);
  if (it == metadata.end()) return {};
  return absl::string_view(it->second.data(), it->second.size());
}

// Whether `id` can travel as a metadata value: 1-256 bytes of printable ASCII. A refused request's
// own id is echoed only then (one that passed validation always can).
inline bool IsMetadataSafe(absl::string_view id) {
  if (id.empty() || id.size() > 256) return false;
  for (char c : id) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

}  // namespace kvserve

#endif  // KVSERVE_API_REQUEST_ID_H_
