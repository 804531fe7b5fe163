#include "router/router_api.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "api/prompt_conversion.h"
#include "base/build_info.h"
#include "base/status_macros.h"
#include "router/request_log.h"

namespace kvserve {

namespace v1 = kvserve::v1;

RouterApi::RouterApi(std::string router_id, const TokenAuth* auth, const PromptRenderer* renderer,
                     WorkerRegistry* registry, const ClusterBooks* books, RouterMetrics* metrics)
    : router_id_(std::move(router_id)),
      auth_(auth),
      renderer_(renderer),
      registry_(registry),
      books_(books),
      metrics_(metrics) {}

absl::StatusOr<std::string> RouterApi::Authenticate(
    std::optional<absl::string_view> authorization) const {
  absl::StatusOr<std::string> tenant =
      auth_->Authenticate(authorization.has_value(), authorization.value_or(""));
  if (!tenant.ok()) metrics_->RecordRejection("unauthenticated");
  return tenant;
}

absl::StatusOr<ServingLimits> RouterApi::Limits() const {
  std::optional<v1::ModelInfo> info = registry_->model_info();
  if (!info.has_value()) {
    return absl::UnavailableError("no worker has reported its model yet; retry shortly");
  }
  return ServingLimitsFromModelInfo(*info, books_->largest_pool_blocks());
}

uint64_t RouterApi::DrawSeed() {
  absl::MutexLock lock(&rng_mu_);
  return absl::Uniform<uint64_t>(rng_);
}

absl::StatusOr<ProxiedRequest> RouterApi::ResolveGenerate(const v1::GenerateRequest& request,
                                                          const std::string& tenant) {
  KVSERVE_ASSIGN_OR_RETURN(ServingLimits limits, Limits());
  // The worker's order (worker/serving_context.cc StartGenerate): the request, the rendered
  // prompt, then the KV fit.
  KVSERVE_RETURN_IF_ERROR(ValidateGenerateRequest(request, limits));
  KVSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, renderer_->Render(PromptInputOf(request)));
  KVSERVE_RETURN_IF_ERROR(ValidatePromptTokens(prompt, limits, "prompt_token_ids.ids"));
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  const int32_t n = std::max(request.sampling().n(), 1);
  if (limits.kv_total_blocks > 0) {
    KVSERVE_RETURN_IF_ERROR(ValidateKvFit(static_cast<int32_t>(prompt_tokens),
                                          request.sampling().max_tokens(), n, limits));
  }
  const uint64_t number = next_request_number_.fetch_add(1);
  ProxiedRequest resolved;
  resolved.client_request_id =
      request.request_id().empty() ? absl::StrCat(router_id_, "-", number) : request.request_id();
  resolved.router_request_id = absl::StrCat(router_id_, "-r", number);
  resolved.prompt_token_ids = std::move(prompt);
  resolved.priority = request.priority();
  resolved.tenant = tenant;
  resolved.cache_salt = TokenAuth::CacheSaltFor(tenant);
  resolved.context_length = limits.context_length;
  resolved.sampling = request.sampling();
  // Fixed before the first dispatch, so a migration reproduces the stream (worker.proto).
  if (!resolved.sampling.has_seed()) resolved.sampling.set_seed(DrawSeed());
  if (resolved.sampling.max_tokens() == 0) {
    const int64_t to_context = std::max<int64_t>(1, limits.context_length - prompt_tokens);
    resolved.sampling.set_max_tokens(static_cast<int32_t>(
        limits.default_max_tokens > 0 ? std::min<int64_t>(limits.default_max_tokens, to_context)
                                      : to_context));
  }
  return resolved;
}

void RouterApi::RecordRefused(const absl::Status& status, absl::string_view request_id) const {
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    metrics_->RecordRejection("invalid_argument");
  }
  metrics_->RecordFinished(absl::StatusCodeToString(status.code()));
  LogRequestRefused(request_id, absl::AsciiStrToLower(absl::StatusCodeToString(status.code())),
                    status);
}

bool RouterApi::AnyWorkerServing() const {
  for (const WorkerSummary& worker : books_->Workers()) {
    if (worker.health == WorkerHealth::kHealthy) return true;
  }
  return false;
}

absl::StatusOr<v1::TokenizeResponse> RouterApi::Tokenize(const v1::TokenizeRequest& request) const {
  KVSERVE_ASSIGN_OR_RETURN(ServingLimits limits, Limits());
  KVSERVE_RETURN_IF_ERROR(ValidateTokenizeRequest(request, limits));
  KVSERVE_ASSIGN_OR_RETURN(
      TokenizedPrompt tokenized,
      renderer_->Tokenize(PromptInputOf(request), request.return_token_bytes()));
  return ToTokenizeResponse(std::move(tokenized));
}

absl::StatusOr<v1::DetokenizeResponse> RouterApi::Detokenize(
    const v1::DetokenizeRequest& request) const {
  KVSERVE_ASSIGN_OR_RETURN(ServingLimits limits, Limits());
  KVSERVE_RETURN_IF_ERROR(ValidateDetokenizeRequest(request, limits));
  KVSERVE_ASSIGN_OR_RETURN(
      std::string text,
      renderer_->Detokenize(request.token_ids(), !request.detokenize_special_tokens()));
  v1::DetokenizeResponse response;
  response.set_text(std::move(text));
  return response;
}

absl::StatusOr<v1::ModelInfo> RouterApi::GetModelInfo(
    const v1::GetModelInfoRequest& request) const {
  KVSERVE_ASSIGN_OR_RETURN(ServingLimits limits, Limits());
  KVSERVE_RETURN_IF_ERROR(ValidateModelName(request.model(), limits));
  v1::ModelInfo info = *registry_->model_info();
  info.set_server_version(KvserveVersionString());
  return info;
}

}  // namespace kvserve
