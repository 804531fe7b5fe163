#include "router/router_service.h"

#include <utility>

#include "api/raw_message.h"
#include "api/request_id.h"
#include "api/status_conversion.h"
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

absl::Status RouterService::Admit(const grpc::CallbackServerContext& call) const {
  return Authenticate(call).status();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RouterService::Generate(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) {
  // The request's own request_id wins over the call's x-request-id metadata.
  std::string request_id(RequestIdOf(*call));
  absl::StatusOr<ProxiedRequest> resolved = [&]() -> absl::StatusOr<ProxiedRequest> {
    KVSERVE_ASSIGN_OR_RETURN(std::string tenant, Authenticate(*call));
    v1::GenerateRequest parsed;
    KVSERVE_RETURN_IF_ERROR(ParseRequest(*request, &parsed));
    if (parsed.request_id().empty()) {
      parsed.set_request_id(request_id);
    } else {
      request_id = parsed.request_id();
    }
    return api_->ResolveGenerate(parsed, tenant);
  }();
  if (!resolved.ok()) {
    api_->RecordRefused(resolved.status(), request_id);
    if (IsMetadataSafe(request_id)) call->AddInitialMetadata(kRequestIdMetadata, request_id);
    return RefuseGenerate(ToGrpcStatus(resolved.status()));
  }
  call->AddInitialMetadata(kRequestIdMetadata, resolved->client_request_id);
  return proxy_->Start(call, *std::move(resolved));
}

absl::StatusOr<v1::TokenizeResponse> RouterService::AnswerTokenize(
    const v1::TokenizeRequest& request) const {
  return api_->Tokenize(request);
}

absl::StatusOr<v1::DetokenizeResponse> RouterService::AnswerDetokenize(
    const v1::DetokenizeRequest& request) const {
  return api_->Detokenize(request);
}

absl::StatusOr<v1::ModelInfo> RouterService::AnswerGetModelInfo(
    const v1::GetModelInfoRequest& request) const {
  return api_->GetModelInfo(request);
}

}  // namespace kvserve
