// StartMetricsExposer: a process's Prometheus /metrics endpoint (prometheus-cpp's Exposer, a
// small HTTP server of its own) on --metrics_listen, started the same way by the worker and the
// router: a listen failure is an error naming the flag, and the bound port is read back (port 0
// asks the OS for a free one).
//
// Thread-safety: pure functions; the Exposer is thread-safe.
#ifndef KVSERVE_HTTP_METRICS_EXPOSER_H_
#define KVSERVE_HTTP_METRICS_EXPOSER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace kvserve {

// Serves `metrics` on `metrics_listen` ("host:port"). INVALID_ARGUMENT
// "--metrics_listen: cannot listen on ..." when the address cannot be served.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& metrics_listen, const std::shared_ptr<prometheus::Collectable>& metrics);

// The port `exposer` listens on; 0 when it listens on none.
int ExposerPort(const prometheus::Exposer& exposer);

}  // namespace kvserve

#endif  // KVSERVE_HTTP_METRICS_EXPOSER_H_
