// RouterService: kvserve.v1.Generation as the router serves it. Every call is authenticated first
// (TokenAuth: UNAUTHENTICATED without a valid bearer token when auth is on). Generate is resolved
// here (request id, model name, priority, prompt rendered to token ids, prompt length, seed and
// max_tokens fixed) and then run through the cluster by GenerateProxy; the worker validates the
// sampling parameters again and its INVALID_ARGUMENT reaches the client unchanged. Tokenize,
// Detokenize and GetModelInfo are answered by the router itself (its tokenizer, and the ModelInfo
// the workers reported), so they cost no worker any work.
//
// Thread-safety: thread-safe (a synchronous gRPC service; handlers run concurrently).
#ifndef KVSERVE_ROUTER_ROUTER_SERVICE_H_
#define KVSERVE_ROUTER_ROUTER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "router/generate_proxy.h"
#include "router/prompt_renderer.h"
#include "router/router_metrics.h"
#include "router/token_auth.h"
#include "router/worker_registry.h"

namespace kvserve {

class RouterService final : public kvserve::v1::Generation::Service {
 public:
  // Everything is borrowed and must outlive the service.
  RouterService(std::string router_id, const TokenAuth* auth, const PromptRenderer* renderer,
                WorkerRegistry* registry, GenerateProxy* proxy, RouterMetrics* metrics);

  grpc::Status Generate(grpc::ServerContext* context, const kvserve::v1::GenerateRequest* request,
                        grpc::ServerWriter<kvserve::v1::GenerateResponse>* writer) override;
  grpc::Status Tokenize(grpc::ServerContext* context, const kvserve::v1::TokenizeRequest* request,
                        kvserve::v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context,
                          const kvserve::v1::DetokenizeRequest* request,
                          kvserve::v1::DetokenizeResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context,
                            const kvserve::v1::GetModelInfoRequest* request,
                            kvserve::v1::ModelInfo* response) override;

 private:
  // The caller's tenant; UNAUTHENTICATED when auth is on and the token is missing or unknown.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContext& context) const;
  // The served model's info; NOT_FOUND when `model` names another one, UNAVAILABLE before any
  // worker reported it.
  absl::StatusOr<kvserve::v1::ModelInfo> ModelInfoFor(const std::string& model) const;
  absl::StatusOr<ProxiedRequest> Resolve(const kvserve::v1::GenerateRequest& request,
                                         const std::string& tenant);
  uint64_t DrawSeed();

  const std::string router_id_;
  const TokenAuth* const auth_;
  const PromptRenderer* const renderer_;
  WorkerRegistry* const registry_;
  GenerateProxy* const proxy_;
  RouterMetrics* const metrics_;
  std::atomic<uint64_t> next_request_number_{1};
  absl::Mutex rng_mu_;
  absl::BitGen rng_ ABSL_GUARDED_BY(rng_mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_SERVICE_H_
