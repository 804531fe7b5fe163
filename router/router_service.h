// RouterService: kvserve.v1.Generation as the router serves it over gRPC. Each call is
// authenticated, its request bytes parsed by api/raw_message.h (invalid UTF-8 or malformed bytes:
// INVALID_ARGUMENT naming the field, never INTERNAL), then answered by RouterApi (router_api.h:
// the same validation, resolution and answers as the router's HTTP front end); Generate runs
// through the cluster by GenerateProxy.
//
// Transport: the gRPC callback API with raw methods (WithRawCallbackMethod_*, as the worker's
// own Generation service), so that parsing the request bytes is ours and not the generated
// deserializer's, and no thread is held per call: the unary methods answer on the callback
// thread, Generate returns a reactor (generate_call.h).
//
// Thread-safety: thread-safe (methods run concurrently on gRPC's callback threads).
#ifndef KVSERVE_ROUTER_ROUTER_SERVICE_H_
#define KVSERVE_ROUTER_ROUTER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/statusor.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "router/generate_proxy.h"
#include "router/router_api.h"

namespace kvserve {

using RouterServiceBase = kvserve::v1::Generation::WithRawCallbackMethod_Generate<
    kvserve::v1::Generation::WithRawCallbackMethod_Tokenize<
        kvserve::v1::Generation::WithRawCallbackMethod_Detokenize<
            kvserve::v1::Generation::WithRawCallbackMethod_GetModelInfo<
                kvserve::v1::Generation::Service>>>>;

class RouterService final : public RouterServiceBase {
 public:
  // Everything is borrowed and must outlive the service.
  RouterService(RouterApi* api, GenerateProxy* proxy);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  // A unary method: authenticate, parse the raw bytes into Request, answer with `method`.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* ServeUnary(
      grpc::CallbackServerContext* call, const grpc::ByteBuffer& request,
      grpc::ByteBuffer* response,
      absl::StatusOr<Response> (RouterApi::*method)(const Request&) const);

  // The caller's tenant from the call's "authorization" metadata.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContextBase& context) const;

  RouterApi* const api_;
  GenerateProxy* const proxy_;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_SERVICE_H_
