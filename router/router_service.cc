#include "router/router_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/raw_message.h"
#include "api/status_conversion.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

// Method indices of kvserve.v1.Generation, in the order of generation.proto.
constexpr int kGenerateMethod = 0;
constexpr int kTokenizeMethod = 1;
constexpr int kDetokenizeMethod = 2;
constexpr int kGetModelInfoMethod = 3;

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
      metrics_(metrics) {
  MarkMethodStreamed(
      kGenerateMethod,
      new grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer, v1::GenerateResponse>(
          [this](grpc::ServerContext* context, GenerateStreamer* streamer) {
            return HandleGenerate(context, streamer);
          }));
  ServeUnary(kTokenizeMethod, &RouterService::HandleTokenize);
  ServeUnary(kDetokenizeMethod, &RouterService::HandleDetokenize);
  ServeUnary(kGetModelInfoMethod, &RouterService::HandleGetModelInfo);
}

template <typename Request, typename Response>
void RouterService::ServeUnary(int index, absl::StatusOr<Response> (RouterService::*method)(
                                              const grpc::ServerContext&, const Request&)) {
  using Streamer = grpc::ServerUnaryStreamer<grpc::ByteBuffer, Response>;
  MarkMethodStreamed(index, new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, Response>(
                                [this, method](grpc::ServerContext* context, Streamer* streamer) {
                                  grpc::ByteBuffer bytes;
                                  if (!streamer->Read(&bytes)) {
                                    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                                        "request: no request message");
                                  }
                                  absl::StatusOr<std::string> tenant = Authenticate(*context);
                                  if (!tenant.ok()) return ToGrpcStatus(tenant.status());
                                  Request request;
                                  if (absl::Status s = ParseRequest(bytes, &request); !s.ok()) {
                                    return ToGrpcStatus(s);
                                  }
                                  absl::StatusOr<Response> response =
                                      (this->*method)(*context, request);
                                  if (response.ok()) streamer->Write(*response);
                                  return ToGrpcStatus(response.status());
                                }));
}

absl::StatusOr<std::string> RouterService::Authenticate(const grpc::ServerContext& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const bool present = it != metadata.end();
  absl::StatusOr<std::string> tenant = auth_->Authenticate(
      present, present ? absl::string_view(it->second.data(), it->second.size()) : "");
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

grpc::Status RouterService::HandleGenerate(grpc::ServerContext* context,
                                           GenerateStreamer* streamer) {
  grpc::ByteBuffer bytes;
  if (!streamer->Read(&bytes)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: no request message");
  }
  absl::StatusOr<std::string> tenant = Authenticate(*context);
  if (!tenant.ok()) {
    metrics_->RecordFinished("UNAUTHENTICATED");
    return ToGrpcStatus(tenant.status());
  }
  v1::GenerateRequest request;
  absl::Status parsed = ParseRequest(bytes, &request);
  absl::StatusOr<ProxiedRequest> resolved =
      parsed.ok() ? Resolve(request, *tenant) : absl::StatusOr<ProxiedRequest>(parsed);
  if (!resolved.ok()) {
    if (resolved.status().code() == absl::StatusCode::kInvalidArgument) {
      metrics_->RecordRejection("invalid_argument");
    }
    metrics_->RecordFinished(absl::StatusCodeToString(resolved.status().code()));
    return ToGrpcStatus(resolved.status());
  }
  grpc::Status status = proxy_->Run(*context, *resolved, [streamer](const v1::GenerateResponse& r) {
    return streamer->Write(r);
  });
  metrics_->RecordFinished(
      absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
  return status;
}

absl::StatusOr<v1::TokenizeResponse> RouterService::HandleTokenize(
    const grpc::ServerContext& /*context*/, const v1::TokenizeRequest& request) {
  absl::StatusOr<ServingLimits> limits = Limits();
  if (!limits.ok()) return limits.status();
  if (absl::Status s = ValidateTokenizeRequest(request, *limits); !s.ok()) return s;
  return renderer_->Tokenize(request);
}

absl::StatusOr<v1::DetokenizeResponse> RouterService::HandleDetokenize(
    const grpc::ServerContext& /*context*/, const v1::DetokenizeRequest& request) {
  absl::StatusOr<ServingLimits> limits = Limits();
  if (!limits.ok()) return limits.status();
  if (absl::Status s = ValidateDetokenizeRequest(request, *limits); !s.ok()) return s;
  return renderer_->Detokenize(request);
}

absl::StatusOr<v1::ModelInfo> RouterService::HandleGetModelInfo(
    const grpc::ServerContext& /*context*/, const v1::GetModelInfoRequest& request) {
  absl::StatusOr<ServingLimits> limits = Limits();
  if (!limits.ok()) return limits.status();
  if (absl::Status s = ValidateModelName(request.model(), *limits); !s.ok()) return s;
  return *registry_->model_info();
}

}  // namespace kvserve
