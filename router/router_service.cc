#include "router/router_service.h"

#include <utility>

#include "api/raw_message.h"
#include "api/status_conversion.h"
#include "api/unary_call.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

}  // namespace

RouterService::RouterService(RouterApi* api, GenerateProxy* proxy) : api_(api), proxy_(proxy) {}

absl::StatusOr<std::string> RouterService::Authenticate(
    const grpc::ServerContextBase& context) const {
  return api_->Authenticate(AuthorizationOf(context));
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* RouterService::ServeUnary(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
    absl::StatusOr<Response> (RouterApi::*method)(const Request&) const) {
  absl::StatusOr<std::string> tenant = Authenticate(*call);
  if (!tenant.ok()) return FinishUnary<Response>(call, tenant.status(), response);
  Request parsed;
  if (absl::Status s = ParseRequest(request, &parsed); !s.ok()) {
    return FinishUnary<Response>(call, s, response);
  }
  return FinishUnary(call, (api_->*method)(parsed), response);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RouterService::Generate(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) {
  absl::StatusOr<ProxiedRequest> resolved = [&]() -> absl::StatusOr<ProxiedRequest> {
    KVSERVE_ASSIGN_OR_RETURN(std::string tenant, Authenticate(*call));
    v1::GenerateRequest parsed;
    KVSERVE_RETURN_IF_ERROR(ParseRequest(*request, &parsed));
    return api_->ResolveGenerate(parsed, tenant);
  }();
  if (!resolved.ok()) {
    api_->RecordRefused(resolved.status());
    return RefuseGenerate(ToGrpcStatus(resolved.status()));
  }
  return proxy_->Start(call, *std::move(resolved));
}

grpc::ServerUnaryReactor* RouterService::Tokenize(grpc::CallbackServerContext* call,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RouterApi::Tokenize);
}

grpc::ServerUnaryReactor* RouterService::Detokenize(grpc::CallbackServerContext* call,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RouterApi::Detokenize);
}

grpc::ServerUnaryReactor* RouterService::GetModelInfo(grpc::CallbackServerContext* call,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RouterApi::GetModelInfo);
}

}  // namespace kvserve
