#include "worker/http_backend.h"

#include <utility>

#include "api/bearer_token.h"
#include "base/status_macros.h"
#include "worker/proto_conversion.h"

namespace kvserve {
namespace {

// One engine request read as GenerateResponse messages.
class EngineGenerationStream : public GenerationStream {
 public:
  EngineGenerationStream(ServingContext* context, StartedRequest started)
      : context_(context), started_(std::move(started)) {}
  ~EngineGenerationStream() override { Cancel(); }

  void SetNotifier(std::function<void()> notifier) override {
    started_.stream->SetNotifier(std::move(notifier));
  }

  ReadResult Read(kvserve::v1::GenerateResponse* out) override {
    EngineOutput output;
    switch (started_.stream->Pop(absl::ZeroDuration(), &output)) {
      case RequestStream::PopResult::kTimeout:
        return ReadResult::kEmpty;
      case RequestStream::PopResult::kEnd:
        return ReadResult::kEnd;
      case RequestStream::PopResult::kOutput:
        out->Clear();
        ToProto(output, started_.client_request_id, out);
        return ReadResult::kMessage;
    }
    return ReadResult::kEmpty;
  }

  absl::Status final_status() const override { return started_.stream->final_status(); }

  void Cancel() override {
    if (!started_.stream->closed()) context_->Abort(started_.engine_request_id);
  }

 private:
  ServingContext* const context_;
  const StartedRequest started_;
};

// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

}  // namespace

WorkerHttpBackend::WorkerHttpBackend(ServingContext* context, std::function<bool()> serving,
                                     std::string api_key)
    : context_(context), serving_(std::move(serving)), api_key_(std::move(api_key)) {}

absl::Status WorkerHttpBackend::Authenticate(const CallContext& call) const {
  if (api_key_.empty()) return absl::OkStatus();
  if (!call.authorization.has_value()) {
    return absl::UnauthenticatedError("missing bearer token (Authorization: Bearer <key>)");
  }
  KVSERVE_ASSIGN_OR_RETURN(absl::string_view token, ParseBearerToken(*call.authorization));
  if (!ConstantTimeEquals(token, api_key_))
    return absl::UnauthenticatedError("invalid bearer token");
  return absl::OkStatus();
}

bool WorkerHttpBackend::Serving() const { return serving_(); }

absl::StatusOr<std::unique_ptr<GenerationStream>> WorkerHttpBackend::Generate(
    const CallContext& /*call*/, const kvserve::v1::GenerateRequest& request) {
  KVSERVE_ASSIGN_OR_RETURN(StartedRequest started, context_->StartGenerate(request));
  return std::make_unique<EngineGenerationStream>(context_, std::move(started));
}

absl::StatusOr<kvserve::v1::TokenizeResponse> WorkerHttpBackend::Tokenize(
    const CallContext& /*call*/, const kvserve::v1::TokenizeRequest& request) {
  return context_->Tokenize(request);
}

absl::StatusOr<kvserve::v1::DetokenizeResponse> WorkerHttpBackend::Detokenize(
    const CallContext& /*call*/, const kvserve::v1::DetokenizeRequest& request) {
  return context_->Detokenize(request);
}

absl::StatusOr<kvserve::v1::ModelInfo> WorkerHttpBackend::GetModelInfo(const CallContext& /*call*/,
                                                                       absl::string_view model) {
  return context_->GetModelInfo(model);
}

}  // namespace kvserve
