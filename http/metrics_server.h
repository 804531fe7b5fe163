// MetricsServer: a process's Prometheus endpoint on --metrics_listen, served by the project's
// HttpServer (the worker and the router start one the same way):
//   GET or HEAD /metrics  the text exposition format (0.0.4) of every registered collectable
//   GET or HEAD /health   200 while the process runs (a liveness probe; readiness is the gRPC
//                         health service and the HTTP API's /health)
//   another method on those paths: 405; any other path: 404 (and the process lives on).
// Every scrape also carries kvserve_build_info{version, commit} 1 (base/build_info.h).
//
// Thread-safety: Register and the scrapes are thread-safe; Start / Stop / the destructor from one
// thread.
#ifndef KVSERVE_HTTP_METRICS_SERVER_H_
#define KVSERVE_HTTP_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "http/http_server.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"

namespace kvserve {

class MetricsServer {
 public:
  // Listens on `metrics_listen` ("host:port"; port 0: any free port). INVALID_ARGUMENT
  // "--metrics_listen <address>: address already in use" (or the other reason) when it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& metrics_listen);
  ~MetricsServer();  // Stop()

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Adds `collectable` to what /metrics serves, after those registered before it. It is kept
  // alive by the server.
  void Register(std::shared_ptr<prometheus::Collectable> collectable);

  int port() const { return server_->port(); }
  // The body GET /metrics returns now.
  std::string Scrape() const;
  // Closes every connection and joins the threads. Idempotent.
  void Stop() { server_->Stop(); }

 private:
  MetricsServer();
  void Handle(const HttpRequest& request, HttpExchange& exchange) const;

  std::shared_ptr<prometheus::Registry> build_info_;
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<HttpServer> server_;
};

}  // namespace kvserve

#endif  // KVSERVE_HTTP_METRICS_SERVER_H_
