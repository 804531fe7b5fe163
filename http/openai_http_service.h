// OpenAiHttpService: one process's OpenAI-compatible HTTP API, wired once for both binaries: an
// OpenAiFrontEnd over the process's GenerationBackend, served by an HttpServer on the host of
// the gRPC --listen address at --http_port, with its HttpMetrics for the process's /metrics.
// The router (router_server.h) and the worker (worker_server.h) each start one with their own
// backend.
//
// Thread-safety: Start / Stop / the destructor from one thread; port() and metrics() are plain.
#ifndef KVSERVE_HTTP_OPENAI_HTTP_SERVICE_H_
#define KVSERVE_HTTP_OPENAI_HTTP_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "http/generation_backend.h"
#include "http/http_metrics.h"
#include "http/http_server.h"
#include "http/metrics_server.h"
#include "http/openai_front_end.h"

namespace kvserve {

class OpenAiHttpService {
 public:
  // Serves `backend` (borrowed; it must outlive the service) on the host part of `listen`
  // ("host:port") at `port` (0: any free port), and registers its metrics on `metrics` (the
  // process's /metrics; borrowed). INVALID_ARGUMENT "--http_port <host:port>: address already in
  // use" (or the other reason) when the port cannot be served.
  static absl::StatusOr<std::unique_ptr<OpenAiHttpService>> Start(
      GenerationBackend* backend, absl::string_view listen, int port,
      std::vector<std::string> model_aliases, MetricsServer* metrics);

  int port() const { return server_->port(); }
  // The kvserve_http_* metrics (also on the MetricsServer given to Start).
  const std::shared_ptr<HttpMetrics>& metrics() const { return metrics_; }
  // Closes every connection (open streams are cancelled). Idempotent.
  void Stop() { server_->Stop(); }

 private:
  OpenAiHttpService() = default;

  std::shared_ptr<HttpMetrics> metrics_;
  std::unique_ptr<OpenAiFrontEnd> front_end_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace kvserve

#endif  // KVSERVE_HTTP_OPENAI_HTTP_SERVICE_H_
