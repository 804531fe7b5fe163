// RouterService: kvserve.v1.Generation as the router serves it over gRPC. Each call is
// authenticated, its request bytes parsed by api/raw_message.h (invalid UTF-8 or malformed bytes:
// INVALID_ARGUMENT naming the field, never INTERNAL), then answered by RouterApi (router_api.h:
// the same validation, resolution and answers as the router's HTTP front end); Generate runs
// through the cluster by GenerateProxy.
//
// Transport: RawGenerationService (api/raw_generation_service.h), the base of the worker's own
// Generation service too: raw methods, so that parsing the request bytes is ours and not the
// generated deserializer's, and no thread is held per call: the unary methods answer on the
// callback thread, Generate returns a reactor (generate_call.h).
//
// Thread-safety: thread-safe (methods run concurrently on gRPC's callback threads).
#ifndef KVSERVE_ROUTER_ROUTER_SERVICE_H_
#define KVSERVE_ROUTER_ROUTER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"
#include "api/raw_generation_service.h"
#include "router/generate_proxy.h"
#include "router/router_api.h"

namespace kvserve {

class RouterService final : public RawGenerationService {
 public:
  // Everything is borrowed and must outlive the service.
  RouterService(RouterApi* api, GenerateProxy* proxy);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override;

 private:
  // Unary calls: authenticated before their request is parsed.
  absl::Status Admit(const grpc::CallbackServerContext& call) const override;
  absl::StatusOr<kvserve::v1::TokenizeResponse> AnswerTokenize(
      const kvserve::v1::TokenizeRequest& request) const override;
  absl::StatusOr<kvserve::v1::DetokenizeResponse> AnswerDetokenize(
      const kvserve::v1::DetokenizeRequest& request) const override;
  absl::StatusOr<kvserve::v1::ModelInfo> AnswerGetModelInfo(
      const kvserve::v1::GetModelInfoRequest& request) const override;

  // The caller's tenant from the call's "authorization" metadata.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContextBase& context) const;

  RouterApi* const api_;
  GenerateProxy* const proxy_;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_SERVICE_H_
