// RouterService: kvserve.v1.Generation as the router serves it. Every call is authenticated first
// (TokenAuth: UNAUTHENTICATED without a valid bearer token when auth is on), then its request
// bytes are parsed by api/raw_message.h and validated by api/request_validation.h against the
// limits the workers publish in ModelInfo: the same functions, in the same order, as the worker's
// own Generation service, so a bad request gets the same status code and message from both
// (invalid UTF-8 or malformed bytes: INVALID_ARGUMENT naming the field, never INTERNAL).
// Generate is then resolved (request id, prompt rendered to token ids, seed and max_tokens fixed,
// the KV-fit rule of kvcache/kv_budget.h checked against the largest pool) and run through the
// cluster by GenerateProxy. Tokenize, Detokenize and GetModelInfo are answered by the router
// itself (its tokenizer, and the ModelInfo the workers reported), so they cost no worker any work.
//
// Transport: the gRPC callback API with raw methods (WithRawCallbackMethod_*, as the worker's
// own Generation service), so that parsing the request bytes is ours and not the generated
// deserializer's, and no thread is held per call: the unary methods answer on the callback
// thread, Generate returns a GenerateCall reactor (generate_call.h).
//
// Thread-safety: thread-safe (methods run concurrently on gRPC's callback threads).
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
#include "api/request_validation.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "router/cluster_books.h"
#include "router/generate_proxy.h"
#include "router/prompt_renderer.h"
#include "router/router_metrics.h"
#include "router/token_auth.h"
#include "router/worker_registry.h"

namespace kvserve {

using RouterServiceBase = kvserve::v1::Generation::WithRawCallbackMethod_Generate<
    kvserve::v1::Generation::WithRawCallbackMethod_Tokenize<
        kvserve::v1::Generation::WithRawCallbackMethod_Detokenize<
            kvserve::v1::Generation::WithRawCallbackMethod_GetModelInfo<
                kvserve::v1::Generation::Service>>>>;

class RouterService final : public RouterServiceBase {
 public:
  // Everything is borrowed and must outlive the service.
  RouterService(std::string router_id, const TokenAuth* auth, const PromptRenderer* renderer,
                WorkerRegistry* registry, const ClusterBooks* books, GenerateProxy* proxy,
                RouterMetrics* metrics);

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  absl::StatusOr<kvserve::v1::TokenizeResponse> HandleTokenize(
      const kvserve::v1::TokenizeRequest& request);
  absl::StatusOr<kvserve::v1::DetokenizeResponse> HandleDetokenize(
      const kvserve::v1::DetokenizeRequest& request);
  absl::StatusOr<kvserve::v1::ModelInfo> HandleGetModelInfo(
      const kvserve::v1::GetModelInfoRequest& request);

  // A unary method: authenticate, parse the raw bytes into Request, answer with `method`.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* ServeUnary(
      grpc::CallbackServerContext* call, const grpc::ByteBuffer& request,
      grpc::ByteBuffer* response,
      absl::StatusOr<Response> (RouterService::*method)(const Request&));

  // The caller's tenant; UNAUTHENTICATED when auth is on and the token is missing or unknown.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContextBase& context) const;
  // What the workers published, as validation limits; UNAVAILABLE before any worker reported.
  absl::StatusOr<ServingLimits> Limits() const;
  absl::StatusOr<ProxiedRequest> Resolve(const kvserve::v1::GenerateRequest& request,
                                         const std::string& tenant);
  uint64_t DrawSeed();

  const std::string router_id_;
  const TokenAuth* const auth_;
  const PromptRenderer* const renderer_;
  WorkerRegistry* const registry_;
  const ClusterBooks* const books_;
  GenerateProxy* const proxy_;
  RouterMetrics* const metrics_;
  std::atomic<uint64_t> next_request_number_{1};
  absl::Mutex rng_mu_;
  absl::BitGen rng_ ABSL_GUARDED_BY(rng_mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_SERVICE_H_
