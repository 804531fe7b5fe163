#include "router/router_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/raw_message.h"
#include "api/status_conversion.h"
#include "api/unary_call.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

}  // namespace

RouterService::RouterService(std::string router_id, const TokenAuth* auth,
                             const PromptRenderer* renderer, WorkerRegistry* registry,
                             const ClusterBooks* books, GenerateProxy* proxy,
                             RouterMetrics* metrics)
    : router_id_(std::move(router_id)),
      auth_(auth),
      renderer_(renderer),
      registry_(registry),
      books_(books),
      proxy_(proxy),
      metrics_(metrics) {}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* RouterService::ServeUnary(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
    absl::StatusOr<Response> (RouterService::*method)(const Request&)) {
  absl::StatusOr<std::string> tenant = Authenticate(*call);
  if (!tenant.ok()) return FinishUnary<Response>(call, tenant.status(), response);
  Request parsed;
  if (absl::Status s = ParseRequest(request, &parsed); !s.ok()) {
    return FinishUnary<Response>(call, s, response);
  }
  return FinishUnary(call, (this->*method)(parsed), response);
}

absl::StatusOr<std::string> RouterService::Authenticate(
    const grpc::ServerContextBase& context) const {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*auth_, context);
  if (!tenant.ok()) metrics_->RecordRejection("unauthenticated");
  return tenant;
}

absl::StatusOr<ServingLimits> RouterService::Limits() const {
  std::optional<v1::ModelInfo> info = registry_->model_info();
  if (!info.has_value()) {
    return absl::UnavailableError("no worker has reported its model yet; retry shortly");
  }
  return ServingLimitsFromModelInfo(*info, books_->largest_pool_blocks());
}

uint64_t RouterService::DrawSeed() {
  absl::MutexLock lock(&rng_mu_);
  return absl::Uniform<uint64_t>(rng_);
}

absl::StatusOr<ProxiedRequest> RouterService::Resolve(const v1::GenerateRequest& request,
                                                      const std::string& tenant) {
  absl::StatusOr<ServingLimits> limits = Limits();
  if (!limits.ok()) return limits.status();
  // The worker's order (worker/serving_context.cc StartGenerate): the request, the rendered
  // prompt, then the KV fit.
  if (absl::Status s = ValidateGenerateRequest(request, *limits); !s.ok()) return s;
  absl::StatusOr<std::vector<int32_t>> prompt = renderer_->Render(request);
  if (!prompt.ok()) return prompt.status();
  if (absl::Status s = ValidatePromptTokens(*prompt, *limits, "prompt_token_ids.ids"); !s.ok()) {
    return s;
  }
  const int64_t prompt_tokens = static_cast<int64_t>(prompt->size());
  const int32_t n = std::max(request.sampling().n(), 1);
  if (limits->kv_total_blocks > 0) {
    if (absl::Status s = ValidateKvFit(static_cast<int32_t>(prompt_tokens),
                                       request.sampling().max_tokens(), n, *limits);
        !s.ok()) {
      return s;
    }
  }
  const uint64_t number = next_request_number_.fetch_add(1);
  ProxiedRequest resolved;
  resolved.client_request_id =
      request.request_id().empty() ? absl::StrCat(router_id_, "-", number) : request.request_id();
  resolved.router_request_id = absl::StrCat(router_id_, "-r", number);
  resolved.prompt_token_ids = *std::move(prompt);
  resolved.priority = request.priority();
  resolved.cache_salt = TokenAuth::CacheSaltFor(tenant);
  resolved.context_length = limits->context_length;
  resolved.sampling = request.sampling();
  // Fixed before the first dispatch, so a migration reproduces the stream (worker.proto).
  if (!resolved.sampling.has_seed()) resolved.sampling.set_seed(DrawSeed());
  if (resolved.sampling.max_tokens() == 0) {
    const int64_t to_context = std::max<int64_t>(1, limits->context_length - prompt_tokens);
    resolved.sampling.set_max_tokens(static_cast<int32_t>(
        limits->default_max_tokens > 0 ? std::min<int64_t>(limits->default_max_tokens, to_context)
                                       : to_context));
  }
  return resolved;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RouterService::Generate(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) {
  absl::StatusOr<std::string> tenant = Authenticate(*call);
  if (!tenant.ok()) {
    metrics_->RecordFinished("UNAUTHENTICATED");
    return RefuseGenerate(ToGrpcStatus(tenant.status()));
  }
  v1::GenerateRequest parsed;
  absl::Status status = ParseRequest(*request, &parsed);
  absl::StatusOr<ProxiedRequest> resolved =
      status.ok() ? Resolve(parsed, *tenant) : absl::StatusOr<ProxiedRequest>(status);
  if (!resolved.ok()) {
    if (resolved.status().code() == absl::StatusCode::kInvalidArgument) {
      metrics_->RecordRejection("invalid_argument");
    }
    metrics_->RecordFinished(absl::StatusCodeToString(resolved.status().code()));
    return RefuseGenerate(ToGrpcStatus(resolved.status()));
  }
  return proxy_->Start(call, *std::move(resolved));
}

grpc::ServerUnaryReactor* RouterService::Tokenize(grpc::CallbackServerContext* call,
                                                  const grpc::ByteBuffer* request,
                                                  grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RouterService::HandleTokenize);
}

grpc::ServerUnaryReactor* RouterService::Detokenize(grpc::CallbackServerContext* call,
                                                    const grpc::ByteBuffer* request,
                                                    grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RouterService::HandleDetokenize);
}

grpc::ServerUnaryReactor* RouterService::GetModelInfo(grpc::CallbackServerContext* call,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RouterService::HandleGetModelInfo);
}

absl::StatusOr<v1::TokenizeResponse> RouterService::HandleTokenize(
    const v1::TokenizeRequest& request) {
  absl::StatusOr<ServingLimits> limits = Limits();
  if (!limits.ok()) return limits.status();
  if (absl::Status s = ValidateTokenizeRequest(request, *limits); !s.ok()) return s;
  return renderer_->Tokenize(request);
}

absl::StatusOr<v1::DetokenizeResponse> RouterService::HandleDetokenize(
    const v1::DetokenizeRequest& request) {
  absl::StatusOr<ServingLimits> limits = Limits();
  if (!limits.ok()) return limits.status();
  if (absl::Status s = ValidateDetokenizeRequest(request, *limits); !s.ok()) return s;
  return renderer_->Detokenize(request);
}

absl::StatusOr<v1::ModelInfo> RouterService::HandleGetModelInfo(
    const v1::GetModelInfoRequest& request) {
  absl::StatusOr<ServingLimits> limits = Limits();
  if (!limits.ok()) return limits.status();
  if (absl::Status s = ValidateModelName(request.model(), *limits); !s.ok()) return s;
  return *registry_->model_info();
}

}  // namespace kvserve
