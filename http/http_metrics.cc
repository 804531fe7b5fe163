#include "http/http_metrics.h"

#include "absl/strings/str_cat.h"

namespace kvserve {

HttpMetrics::HttpMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("kvserve_http_requests_total")
                   .Help("HTTP responses sent, by endpoint and HTTP status code")
                   .Register(*registry_);
  open_streams_ = &prometheus::BuildGauge()
                       .Name("kvserve_http_open_streams")
                       .Help("Server-Sent-Events responses in progress")
                       .Register(*registry_)
                       .Add({});
}

std::string HttpMetrics::EndpointLabel(absl::string_view path) {
  for (absl::string_view known : {"/v1/completions", "/v1/chat/completions", "/v1/models",
                                  "/health", "/tokenize", "/detokenize", "/tokenizer_info"}) {
    if (path == known) return std::string(known);
  }
  return "other";
}

void HttpMetrics::RecordResponse(absl::string_view path, int http_status) {
  requests_->Add({{"endpoint", EndpointLabel(path)}, {"code", absl::StrCat(http_status)}})
      .Increment();
}

void HttpMetrics::StreamOpened() { open_streams_->Increment(); }
void HttpMetrics::StreamClosed() { open_streams_->Decrement(); }

std::vector<prometheus::MetricFamily> HttpMetrics::Collect() const { return registry_->Collect(); }

}  // namespace kvserve
