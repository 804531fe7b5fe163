// RouterApi: what the router answers, whatever transport a call came in on. The gRPC service
// (router_service.h) and the OpenAI-compatible HTTP front end (router_http_backend.h) both
// authenticate, validate, resolve and answer through it, so a request gets the same status and
// message from either, and both run Generate through the same GenerateProxy.
//
//   Authenticate     bearer token -> tenant (TokenAuth; UNAUTHENTICATED, counted)
//   ResolveGenerate  validate with the worker's own functions (api/request_validation.h) against
//                    the limits the workers publish in ModelInfo, render the prompt with the
//                    router's tokenizer and chat template, check the KV fit (kvcache/kv_budget.h)
//                    against the largest pool, fix the request id, seed and max_tokens, and the
//                    tenant's cache salt
//   Tokenize, Detokenize, GetModelInfo
//                    answered by the router itself (its tokenizer, the workers' ModelInfo), so
//                    they cost no worker any work
//   RecordRefused    the metrics of a call refused before it ran
//
// The prompt itself is rendered by PromptRenderer (tokenizer/prompt_renderer.h), the class the
// workers render with, from the messages as converted by api/prompt_conversion.h.
//
// Thread-safety: thread-safe (calls come concurrently from gRPC's and the HTTP server's threads).
#ifndef KVSERVE_ROUTER_ROUTER_API_H_
#define KVSERVE_ROUTER_ROUTER_API_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "api/request_validation.h"
#include "kvserve/v1/generation.pb.h"
#include "router/cluster_books.h"
#include "router/request_progress.h"
#include "router/router_metrics.h"
#include "router/token_auth.h"
#include "router/worker_registry.h"
#include "tokenizer/prompt_renderer.h"

namespace kvserve {

class RouterApi {
 public:
  // Everything is borrowed and must outlive the API.
  RouterApi(std::string router_id, const TokenAuth* auth, const PromptRenderer* renderer,
            WorkerRegistry* registry, const ClusterBooks* books, RouterMetrics* metrics);

  // The caller's tenant from its "authorization" value (nullopt: none was sent).
  absl::StatusOr<std::string> Authenticate(std::optional<absl::string_view> authorization) const;

  absl::StatusOr<ProxiedRequest> ResolveGenerate(const kvserve::v1::GenerateRequest& request,
                                                 const std::string& tenant);
  absl::StatusOr<kvserve::v1::TokenizeResponse> Tokenize(
      const kvserve::v1::TokenizeRequest& request) const;
  absl::StatusOr<kvserve::v1::DetokenizeResponse> Detokenize(
      const kvserve::v1::DetokenizeRequest& request) const;
  absl::StatusOr<kvserve::v1::ModelInfo> GetModelInfo(
      const kvserve::v1::GetModelInfoRequest& request) const;

  // Counts and logs a Generate call (`request_id` as the client sent it, "" when none) that
  // ended with `status` before it was proxied.
  void RecordRefused(const absl::Status& status, absl::string_view request_id) const;

  // Whether a new request could be served now: some worker is routable.
  bool AnyWorkerServing() const;

 private:
  // What the workers published, as validation limits; UNAVAILABLE before any worker reported.
  absl::StatusOr<ServingLimits> Limits() const;
  uint64_t DrawSeed();

  const std::string router_id_;
  const TokenAuth* const auth_;
  const PromptRenderer* const renderer_;
  WorkerRegistry* const registry_;
  const ClusterBooks* const books_;
  RouterMetrics* const metrics_;
  std::atomic<uint64_t> next_request_number_{1};
  absl::Mutex rng_mu_;
  absl::BitGen rng_ ABSL_GUARDED_BY(rng_mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_API_H_
