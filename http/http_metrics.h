// HttpMetrics: the HTTP front end's Prometheus metrics (docs/metrics.md):
//   kvserve_http_requests_total{endpoint, code}   responses sent, by route and HTTP status
//   kvserve_http_open_streams                      Server-Sent-Event responses in progress
// `endpoint` is the request path for the API's routes and "other" for anything else, so a
// scanner cannot blow up the label set. Register it on the MetricsServer.
//
// Thread-safety: thread-safe (prometheus-cpp metrics are).
#ifndef KVSERVE_HTTP_HTTP_METRICS_H_
#define KVSERVE_HTTP_HTTP_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace kvserve {

class HttpMetrics : public prometheus::Collectable {
 public:
  HttpMetrics();

  // `path` without the query string.
  void RecordResponse(absl::string_view path, int http_status);
  void StreamOpened();
  void StreamClosed();

  std::vector<prometheus::MetricFamily> Collect() const override;

  // The endpoint label of `path`.
  static std::string EndpointLabel(absl::string_view path);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Gauge* open_streams_;
};

}  // namespace kvserve

#endif  // KVSERVE_HTTP_HTTP_METRICS_H_
