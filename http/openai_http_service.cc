#include "http/openai_http_service.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "api/listen_check.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<OpenAiHttpService>> OpenAiHttpService::Start(
    GenerationBackend* backend, absl::string_view listen, int port,
    std::vector<std::string> model_aliases, MetricsServer* metrics) {
  std::unique_ptr<OpenAiHttpService> service(new OpenAiHttpService());
  service->metrics_ = std::make_shared<HttpMetrics>();
  service->front_end_ = std::make_unique<OpenAiFrontEnd>(
      backend, OpenAiFrontEndOptions{.model_aliases = std::move(model_aliases)});
  HttpServerOptions options;
  options.host = std::string(listen.substr(0, listen.rfind(':')));
  options.port = port;
  absl::StatusOr<std::unique_ptr<HttpServer>> started = HttpServer::Start(
      options,
      [front_end = service->front_end_.get()](HttpRequest request,
                                              std::shared_ptr<HttpExchange> exchange) {
        front_end->Handle(std::move(request), std::move(exchange));
      },
      service->metrics_.get());
  if (!started.ok()) {
    return ListenError("--http_port", absl::StrCat(options.host, ":", port),
                       started.status().message());
  }
  service->server_ = *std::move(started);
  metrics->Register(service->metrics_);
  return service;
}

}  // namespace kvserve
