// FinishUnary: ends a unary callback-API call with an absl::StatusOr result, shared by both
// services so that a unary method body is one line. On success the value is moved (or, for raw
// methods, serialized) into the response; the status goes through ToGrpcStatus.
//
// Thread-safety: called on the gRPC thread that runs the method.
#ifndef KVSERVE_API_UNARY_CALL_H_
#define KVSERVE_API_UNARY_CALL_H_

#include <grpcpp/grpcpp.h>

#include <type_traits>
#include <utility>

#include "absl/status/statusor.h"
#include "api/raw_message.h"
#include "api/status_conversion.h"

namespace kvserve {

template <typename T, typename Response>
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* call, absl::StatusOr<T> result,
                                      Response* response) {
  grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
  if (result.ok()) {
    if constexpr (std::is_same_v<Response, grpc::ByteBuffer>) {
      *response = ToByteBuffer(*result);
    } else {
      *response = *std::move(result);
    }
  }
  reactor->Finish(ToGrpcStatus(result.status()));
  return reactor;
}

}  // namespace kvserve

#endif  // KVSERVE_API_UNARY_CALL_H_
