// WorkerServer: one running kvserve worker, wired together: the engine (with WorkerMetrics as
// its observer), the ServingContext, the Generation and Worker gRPC services, grpc.health.v1
// and server reflection on the gRPC port, and /metrics on the metrics port (http/metrics_server.h).
// main() and the in-process service tests build it the same way; only the ModelRunner differs.
//
// With --http_port, the OpenAI-compatible HTTP API (http/openai_front_end.h) is served on the
// host of --listen through WorkerHttpBackend, with its metrics on the metrics port.
//
// Health: "" and the service names kvserve.v1.Generation and kvserve.v1.Worker are SERVING
// until the worker drains or its engine fails (a runner error: then every in-flight request has
// ended with INTERNAL, or UNAVAILABLE when a tensor-parallel rank failed; new ones get
// UNAVAILABLE, and StreamStatus says `failed`).
//
// Drain (SIGTERM): health turns NOT_SERVING, new Generate calls get UNAVAILABLE, running and
// waiting requests continue until they finish or the timeout passes; then the requests left end
// with UNAVAILABLE (a router migrates them) and, for --drain_kv_handoff_s, the worker goes on
// serving FetchKvBlocks and its status streams, so their new workers can fetch their blocks;
// then the engine shuts down and the server stops.
//
// Thread-safety: Start/Drain/destructor from one thread; the ports are plain values.
#ifndef KVSERVE_WORKER_WORKER_SERVER_H_
#define KVSERVE_WORKER_WORKER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "http/metrics_server.h"
#include "http/openai_http_service.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"
#include "worker/generation_service.h"
#include "worker/http_backend.h"
#include "worker/kv_fetcher.h"
#include "worker/metrics.h"
#include "worker/serving_context.h"
#include "worker/worker_options.h"
#include "worker/worker_service.h"

namespace kvserve {

class WorkerServer {
 public:
  // Builds and starts everything. `tokenizer` may be null (token-id input only); with
  // --chat_template its chat template is replaced by the file's. Errors name the flag at fault
  // (e.g. "--listen 127.0.0.1:50061: address already in use").
  // REQUIRES: options.Validate().ok()
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options,
                                                             std::unique_ptr<ModelRunner> runner,
                                                             std::unique_ptr<Tokenizer> tokenizer,
                                                             const ModelConfig& config);
  // Drains with no grace if Drain was not called.
  ~WorkerServer();

  WorkerServer(const WorkerServer&) = delete;
  WorkerServer& operator=(const WorkerServer&) = delete;

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_server_->port(); }
  // The OpenAI-compatible HTTP port; -1 when --http_port is off.
  int http_port() const { return http_ != nullptr ? http_->port() : -1; }
  // Ready, not draining, engine healthy: what /health and grpc.health.v1 say.
  bool serving();
  const std::string& worker_id() const { return worker_id_; }
  // Usable KV blocks of the pool (sized at start-up; also the kvserve_kv_blocks gauge).
  int32_t num_kv_blocks() const;

  // See above; true when every request finished within `timeout`. Idempotent.
  bool Drain(absl::Duration timeout);

  ServingContext& context() { return *context_; }
  WorkerMetrics& metrics() { return *metrics_; }

 private:
  WorkerServer() = default;
  // The HTTP server of --http_port, its front end and backend.
  absl::Status StartHttp(const WorkerOptions& options);
  // The engine's failure listener (engine thread): health NOT_SERVING.
  void OnEngineFailed();

  std::unique_ptr<Tokenizer> tokenizer_;
  std::shared_ptr<WorkerMetrics> metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ServingContext> context_;
  std::unique_ptr<KvFetcher> kv_fetcher_;  // null with --kv_fetch_timeout_s=0
  absl::Duration kv_handoff_ = absl::ZeroDuration();
  std::unique_ptr<GenerationService> generation_service_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<WorkerHttpBackend> http_backend_;
  std::unique_ptr<OpenAiHttpService> http_;  // stopped before the engine goes
  std::string worker_id_;
  int grpc_port_ = 0;
  bool drained_ = false;
  absl::Mutex health_mu_;
  bool health_ready_ ABSL_GUARDED_BY(health_mu_) = false;  // server_ built and started
  bool engine_failed_ ABSL_GUARDED_BY(health_mu_) = false;
};

// EngineOptions from the worker's flags (block size, KV budget, batch limits).
EngineOptions ToEngineOptions(const WorkerOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_WORKER_WORKER_SERVER_H_
