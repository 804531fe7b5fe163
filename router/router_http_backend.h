// RouterHttpBackend: the router's GenerationBackend (http/generation_backend.h), so the router
// serves the OpenAI-compatible HTTP API (http/openai_front_end.h, --http_port) with the same
// auth (bearer token -> tenant -> cache salt), validation, admission, routing and migration as
// its gRPC service: calls go through RouterApi (router_api.h) and each Generate runs as a
// GenerateCall (generate_call.h) whose client side is an HTTP stream instead of a gRPC reactor.
//
// The HTTP stream holds at most one message: the GenerateCall sends the next one only after the
// front end Read the previous (the same flow control as a gRPC write). Cancel (the client left,
// or its X-Request-Timeout-Ms passed) cancels the call: it leaves the admission queue or its
// worker call is cancelled, which frees the request's KV blocks on the worker.
//
// Thread-safety: thread-safe.
#ifndef KVSERVE_ROUTER_ROUTER_HTTP_BACKEND_H_
#define KVSERVE_ROUTER_ROUTER_HTTP_BACKEND_H_

#include <atomic>
#include <memory>

#include "http/generation_backend.h"
#include "router/generate_proxy.h"
#include "router/router_api.h"

namespace kvserve {

class RouterHttpBackend : public GenerationBackend {
 public:
  // Borrowed; they must outlive the backend and every stream it returned.
  RouterHttpBackend(RouterApi* api, GenerateProxy* proxy);

  // Drain: from now on Serving() is false (/health answers 503).
  void StopServing() { serving_ = false; }

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
  absl::StatusOr<std::string> TenantOf(const CallContext& call) const;

  RouterApi* const api_;
  GenerateProxy* const proxy_;
  std::atomic<bool> serving_{true};
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_HTTP_BACKEND_H_
