// RouterServer: one running kvserve router, wired together: the books and admission queue
// (router core), worker discovery and status streams (WorkerRegistry), the tokenizer
// (tokenizer/prompt_renderer.h), bearer-token auth, the Generation service with grpc.health.v1 and
// reflection on the gRPC port (TLS / mTLS when configured), the OpenAI-compatible HTTP API on
// --http_port (both through one RouterApi and one GenerateProxy), and Prometheus metrics on the
// metrics port. main() builds it from flags; tests and benchmarks build it the same way.
//
// Drain (SIGTERM): health turns NOT_SERVING (HTTP /health 503), running calls get `timeout` to
// finish, then the servers stop (calls still open end, and their worker calls are cancelled
// with them).
//
// Thread-safety: Start / Drain / destructor from one thread; the accessors are plain values.
#ifndef KVSERVE_ROUTER_ROUTER_SERVER_H_
#define KVSERVE_ROUTER_ROUTER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "http/metrics_server.h"
#include "http/openai_http_service.h"
#include "router/admission_queue.h"
#include "router/cluster_books.h"
#include "router/generate_proxy.h"
#include "router/router_admin_service.h"
#include "router/router_api.h"
#include "router/router_http_backend.h"
#include "router/router_metrics.h"
#include "router/router_server_options.h"
#include "router/router_service.h"
#include "router/token_auth.h"
#include "router/worker_registry.h"
#include "tokenizer/prompt_renderer.h"

namespace kvserve {

class RouterServer {
 public:
  // Builds and starts everything. Errors name the flag at fault.
  // REQUIRES: options.Validate().ok()
  static absl::StatusOr<std::unique_ptr<RouterServer>> Start(const RouterServerOptions& options);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_server_->port(); }
  // The OpenAI-compatible HTTP port; -1 when --http_port is off.
  int http_port() const { return http_ != nullptr ? http_->port() : -1; }
  ClusterBooks& books() { return *books_; }

  // See above. Idempotent.
  void Drain(absl::Duration timeout);

 private:
  RouterServer() = default;
  absl::Status StartHttp(const RouterServerOptions& options);

  TokenAuth auth_;
  std::unique_ptr<PromptRenderer> renderer_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<ClusterBooks> books_;
  std::unique_ptr<AdmissionQueue> queue_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<GenerateProxy> proxy_;
  std::unique_ptr<RouterApi> api_;
  std::unique_ptr<RouterService> service_;
  std::unique_ptr<RouterAdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<RouterHttpBackend> http_backend_;
  std::unique_ptr<OpenAiHttpService> http_;  // after its backend: stopped and destroyed first
  int grpc_port_ = 0;
  bool drained_ = false;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_SERVER_H_
