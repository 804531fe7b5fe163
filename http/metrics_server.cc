#include "http/metrics_server.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/listen_check.h"
#include "base/build_info.h"
#include "prometheus/gauge.h"
#include "prometheus/text_serializer.h"

namespace kvserve {
namespace {

constexpr char kText[] = "text/plain; charset=utf-8";
constexpr char kExposition[] = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace

MetricsServer::MetricsServer() : build_info_(std::make_shared<prometheus::Registry>()) {
  prometheus::BuildGauge()
      .Name("kvserve_build_info")
      .Help("Always 1; the labels say which kvserve build this process runs")
      .Register(*build_info_)
      .Add({{"version", KvserveVersion()}, {"commit", KvserveCommit()}})
      .Set(1);
  collectables_.push_back(build_info_);
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& metrics_listen) {
  std::unique_ptr<MetricsServer> metrics(new MetricsServer());
  HttpServerOptions options;
  const size_t colon = metrics_listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(metrics_listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen ", metrics_listen, ": expected host:port"));
  }
  options.host = metrics_listen.substr(0, colon);
  options.port = port;
  options.num_threads = 1;
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Start(
      options,
      [raw = metrics.get()](HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
        raw->Handle(request, *exchange);
      },
      /*metrics=*/nullptr);
  if (!server.ok()) {
    return ListenError("--metrics_listen", metrics_listen, server.status().message());
  }
  metrics->server_ = *std::move(server);
  return metrics;
}

MetricsServer::~MetricsServer() {
  if (server_ != nullptr) server_->Stop();
}

void MetricsServer::Register(std::shared_ptr<prometheus::Collectable> collectable) {
  absl::MutexLock lock(&mu_);
  collectables_.push_back(std::move(collectable));
}

std::string MetricsServer::Scrape() const {
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables;
  {
    absl::MutexLock lock(&mu_);
    collectables = collectables_;
  }
  std::vector<prometheus::MetricFamily> families;
  for (const std::shared_ptr<prometheus::Collectable>& collectable : collectables) {
    std::vector<prometheus::MetricFamily> collected = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(collected.begin()),
                    std::make_move_iterator(collected.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

void MetricsServer::Handle(const HttpRequest& request, HttpExchange& exchange) const {
  const bool metrics = request.path == "/metrics";
  if (!metrics && request.path != "/health") {
    exchange.Respond(404, kText, absl::StrCat("no route ", request.path, "; try /metrics\n"));
    return;
  }
  if (request.method != "GET" && request.method != "HEAD") {
    exchange.Respond(405, kText, absl::StrCat(request.path, " takes GET or HEAD\n"),
                     {{"Allow", "GET, HEAD"}});
    return;
  }
  if (metrics) {
    exchange.Respond(200, kExposition, Scrape());
  } else {
    exchange.Respond(200, kText, "ok\n");
  }
}

}  // namespace kvserve
