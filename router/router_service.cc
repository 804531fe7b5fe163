#include "router/router_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status ValidateRequestId(const std::string& id) {
  if (id.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id: at most 128 characters, got ", id.size()));
  }
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != ':' &&
        c != '-') {
      return absl::InvalidArgumentError("request_id: only [A-Za-z0-9._:-] are allowed");
    }
  }
  return absl::OkStatus();
}

}  // namespace

RouterService::RouterService(std::string router_id, const TokenAuth* auth,
                             const PromptRenderer* renderer, WorkerRegistry* registry,
                             GenerateProxy* proxy, RouterMetrics* metrics)
    : router_id_(std::move(router_id)),
      auth_(auth),
      renderer_(renderer),
      registry_(registry),
      proxy_(proxy),
      metrics_(metrics) {}

absl::StatusOr<std::string> RouterService::Authenticate(const grpc::ServerContext& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const bool present = it != metadata.end();
  absl::StatusOr<std::string> tenant = auth_->Authenticate(
      present, present ? absl::string_view(it->second.data(), it->second.size()) : "");
  if (!tenant.ok()) metrics_->RecordRejection("unauthenticated");
  return tenant;
}

absl::StatusOr<v1::ModelInfo> RouterService::ModelInfoFor(const std::string& model) const {
  std::optional<v1::ModelInfo> info = registry_->model_info();
  if (!info.has_value()) {
    return absl::UnavailableError("no worker has reported its model yet; retry shortly");
  }
  if (!model.empty() && model != info->name()) {
    return absl::NotFoundError(
        absl::StrCat("model: '", model, "' is not served here (serving '", info->name(), "')"));
  }
  return *std::move(info);
}

uint64_t RouterService::DrawSeed() {
  absl::MutexLock lock(&rng_mu_);
  return absl::Uniform<uint64_t>(rng_);
}

absl::StatusOr<ProxiedRequest> RouterService::Resolve(const v1::GenerateRequest& request,
                                                      const std::string& tenant) {
  if (absl::Status s = ValidateRequestId(request.request_id()); !s.ok()) return s;
  absl::StatusOr<v1::ModelInfo> info = ModelInfoFor(request.model());
  if (!info.ok()) return info.status();
  if (request.priority() < -100 || request.priority() > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority: must be in [-100, 100], got ", request.priority()));
  }
  absl::StatusOr<std::vector<int32_t>> prompt = renderer_->Render(request);
  if (!prompt.ok()) return prompt.status();
  const int64_t prompt_tokens = static_cast<int64_t>(prompt->size());
  if (prompt_tokens == 0) return absl::InvalidArgumentError("input: the prompt is empty");
  const v1::GenerationLimits& limits = info->limits();
  if (prompt_tokens > limits.max_prompt_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input: prompt has ", prompt_tokens, " tokens, the limit is ", limits.max_prompt_tokens()));
  }
  const uint64_t number = next_request_number_.fetch_add(1);
  ProxiedRequest resolved;
  resolved.client_request_id =
      request.request_id().empty() ? absl::StrCat(router_id_, "-", number) : request.request_id();
  resolved.router_request_id = absl::StrCat(router_id_, "-r", number);
  resolved.prompt_token_ids = *std::move(prompt);
  resolved.priority = request.priority();
  resolved.cache_salt = TokenAuth::CacheSaltFor(tenant);
  resolved.sampling = request.sampling();
  // Fixed before the first dispatch, so a migration reproduces the stream (worker.proto).
  if (!resolved.sampling.has_seed()) resolved.sampling.set_seed(DrawSeed());
  if (resolved.sampling.max_tokens() < 0 || resolved.sampling.max_tokens() > limits.max_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("sampling.max_tokens: must be in [0, ",
                                                   limits.max_tokens(), "], got ",
                                                   resolved.sampling.max_tokens()));
  }
  if (resolved.sampling.max_tokens() == 0) {
    const int64_t to_context = std::max<int64_t>(1, info->context_length() - prompt_tokens);
    resolved.sampling.set_max_tokens(static_cast<int32_t>(
        limits.default_max_tokens() > 0 ? std::min<int64_t>(limits.default_max_tokens(), to_context)
                                        : to_context));
  }
  return resolved;
}

grpc::Status RouterService::Generate(grpc::ServerContext* context,
                                     const v1::GenerateRequest* request,
                                     grpc::ServerWriter<v1::GenerateResponse>* writer) {
  absl::StatusOr<std::string> tenant = Authenticate(*context);
  if (!tenant.ok()) {
    metrics_->RecordFinished("UNAUTHENTICATED");
    return ToGrpc(tenant.status());
  }
  absl::StatusOr<ProxiedRequest> resolved = Resolve(*request, *tenant);
  if (!resolved.ok()) {
    if (resolved.status().code() == absl::StatusCode::kInvalidArgument) {
      metrics_->RecordRejection("invalid_argument");
    }
    metrics_->RecordFinished(absl::StatusCodeToString(resolved.status().code()));
    return ToGrpc(resolved.status());
  }
  grpc::Status status = proxy_->Run(
      *context, *resolved, [writer](const v1::GenerateResponse& r) { return writer->Write(r); });
  metrics_->RecordFinished(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
  return status;
}

grpc::Status RouterService::Tokenize(grpc::ServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) {
  if (absl::StatusOr<std::string> tenant = Authenticate(*context); !tenant.ok()) {
    return ToGrpc(tenant.status());
  }
  if (!request->model().empty()) {
    if (absl::StatusOr<v1::ModelInfo> info = ModelInfoFor(request->model()); !info.ok()) {
      return ToGrpc(info.status());
    }
  }
  absl::StatusOr<v1::TokenizeResponse> tokenized = renderer_->Tokenize(*request);
  if (!tokenized.ok()) return ToGrpc(tokenized.status());
  *response = *std::move(tokenized);
  return grpc::Status::OK;
}

grpc::Status RouterService::Detokenize(grpc::ServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) {
  if (absl::StatusOr<std::string> tenant = Authenticate(*context); !tenant.ok()) {
    return ToGrpc(tenant.status());
  }
  if (!request->model().empty()) {
    if (absl::StatusOr<v1::ModelInfo> info = ModelInfoFor(request->model()); !info.ok()) {
      return ToGrpc(info.status());
    }
  }
  absl::StatusOr<v1::DetokenizeResponse> text = renderer_->Detokenize(*request);
  if (!text.ok()) return ToGrpc(text.status());
  *response = *std::move(text);
  return grpc::Status::OK;
}

grpc::Status RouterService::GetModelInfo(grpc::ServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) {
  if (absl::StatusOr<std::string> tenant = Authenticate(*context); !tenant.ok()) {
    return ToGrpc(tenant.status());
  }
  absl::StatusOr<v1::ModelInfo> info = ModelInfoFor(request->model());
  if (!info.ok()) return ToGrpc(info.status());
  *response = *std::move(info);
  return grpc::Status::OK;
}

}  // namespace kvserve
