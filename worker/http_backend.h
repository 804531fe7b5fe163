// WorkerHttpBackend: the worker's GenerationBackend (http/generation_backend.h), so that a
// standalone worker serves the OpenAI-compatible HTTP API (http/openai_front_end.h) with the same
// request logic as its gRPC Generation service: ServingContext validates, tokenizes and submits,
// and each engine RequestStream is read as GenerateResponse messages (proto_conversion.h).
// Cancel aborts the engine request, which frees its KV blocks before the next step.
//
// Auth: with an api key set, every call must carry "Authorization: Bearer <key>"
// (UNAUTHENTICATED otherwise); with none, every call is allowed.
//
// Thread-safety: thread-safe; the context is borrowed and outlives the backend.
#ifndef KVSERVE_WORKER_HTTP_BACKEND_H_
#define KVSERVE_WORKER_HTTP_BACKEND_H_

#include <functional>
#include <memory>
#include <string>

#include "http/generation_backend.h"
#include "worker/serving_context.h"

namespace kvserve {

class WorkerHttpBackend : public GenerationBackend {
 public:
  // `serving` says whether the worker serves now (not draining, engine healthy).
  WorkerHttpBackend(ServingContext* context, std::function<bool()> serving, std::string api_key);

  absl::Status Authenticate(const CallContext& call) const override;
  bool Serving() const override;
  absl::StatusOr<std::unique_ptr<GenerationStream>> Generate(
      const CallContext& call, const kvserve::v1::GenerateRequest& request) override;
  absl::StatusOr<kvserve::v1::TokenizeResponse> Tokenize(
      const CallContext& call, const kvserve::v1::TokenizeRequest& request) override;
  absl::StatusOr<kvserve::v1::DetokenizeResponse> Detokenize(
      const CallContext& call, const kvserve::v1::DetokenizeRequest& request) override;
  absl::StatusOr<kvserve::v1::ModelInfo> GetModelInfo(const CallContext& call,
                                                      absl::string_view model) override;

 private:
  ServingContext* const context_;
  const std::function<bool()> serving_;
  const std::string api_key_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_HTTP_BACKEND_H_
