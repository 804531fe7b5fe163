// GenerateProxy: runs one client Generate call through the cluster. It admits the request
// (AdmissionQueue: route now, or wait, or refuse), opens Worker.Generate on the chosen worker,
// forwards every message to the client (with the client's request id, and the request's usage in
// the last message), and keeps each choice's progress: the tokens it generated and the text bytes
// the client received.
//
// Migration: when the worker's stream fails without an error of the request's own making
// (UNAVAILABLE: the worker died, drained past its grace period, or the connection broke;
// INTERNAL: its engine failed, a worker failure like a crash, so the request moves too; also
// UNKNOWN / ABORTED, a stream that ends OK without usage, and RESOURCE_EXHAUSTED before
// any output), the request is admitted again excluding every worker that failed it, preferring
// the worker with the longest cached prefix, and resubmitted with each unfinished choice's
// generated tokens and emitted text bytes (worker.proto WorkerChoice). The seed was fixed before
// the first dispatch, so the continuation is the token sequence the first worker would have
// produced: the client sees one stream with nothing lost or repeated. At most `max_migrations`
// times per request. When no worker can take over (migrations exhausted, or no other worker is
// routable), the request ends with UNAVAILABLE, whether or not it already sent output (the
// tokens sent stand; a retry starts over). Only a request whose every choice already finished,
// and which lacks just its usage message, ends with usage and OK.
//
// Cancellation: each worker call's ClientContext is made with FromServerContext, so the client's
// deadline and cancellation propagate to it; a failed write to the client cancels it too. A
// request's reservation in the books is released whenever its worker call ends, so nothing stays
// charged and no worker stream outlives the client's.
//
// Thread-safety: thread-safe; Run() is called concurrently from the gRPC handler threads.
#ifndef KVSERVE_ROUTER_GENERATE_PROXY_H_
#define KVSERVE_ROUTER_GENERATE_PROXY_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/worker.pb.h"
#include "router/admission_queue.h"
#include "router/cluster_books.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"

namespace kvserve {

// A Generate request as the service resolved it: ready to dispatch.
struct ProxiedRequest {
  std::string client_request_id;          // echoed in every response
  std::string router_request_id;          // unique in this router; keys the reservation
  std::vector<int32_t> prompt_token_ids;  // chat template and special tokens applied
  kvserve::v1::SamplingParams sampling;   // seed set, max_tokens > 0
  int priority = 0;
  std::string cache_salt;      // from the authenticated tenant
  int64_t context_length = 0;  // one choice's prompt + output at most (pool-limited); 0: no cap
};

class GenerateProxy {
 public:
  // Sends one message to the client; false when the client is gone.
  using Writer = std::function<bool(const kvserve::v1::GenerateResponse&)>;

  // Everything is borrowed and must outlive the proxy. REQUIRES: max_migrations >= 0.
  GenerateProxy(WorkerRegistry* registry, ClusterBooks* books, AdmissionQueue* queue,
                RouterMetrics* metrics, int max_migrations);

  // Runs `request` to its end; the returned status ends the client's call.
  grpc::Status Run(grpc::ServerContext& server_context, const ProxiedRequest& request,
                   const Writer& write);

 private:
  struct ChoiceProgress {
    std::vector<int32_t> token_ids;  // generated so far, all calls
    int64_t text_bytes = 0;          // text sent to the client so far
    bool finished = false;
  };

  // Routes now or waits in the admission queue until routed, refused, cancelled or past the
  // client's deadline. On OK the decision's blocks are reserved for the request.
  absl::StatusOr<RoutingDecision> Admit(grpc::ServerContext& server_context, RouteRequest route,
                                        int priority);
  // The route of a (re)submission: the context to prefill and the blocks still needed.
  RouteRequest RouteFor(const ProxiedRequest& request, const std::vector<ChoiceProgress>& choices,
                        const std::vector<std::string>& excluded) const;

  WorkerRegistry* const registry_;
  ClusterBooks* const books_;
  AdmissionQueue* const queue_;
  RouterMetrics* const metrics_;
  const int max_migrations_;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_GENERATE_PROXY_H_
