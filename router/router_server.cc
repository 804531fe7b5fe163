#include "router/router_server.h"

#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "api/grpc_server.h"
#include "api/listen_check.h"
#include "api/serving_fingerprint.h"
#include "base/status_macros.h"
#include "http/metrics_server.h"

namespace kvserve {
namespace {

std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const RouterServerOptions& options,
                                                           const RouterTlsMaterial& tls) {
  if (!options.tls_enabled()) return grpc::InsecureServerCredentials();
  return TlsServerCredentials(tls.cert_chain_pem, tls.private_key_pem, tls.client_ca_pem);
}

std::shared_ptr<grpc::ChannelCredentials> WorkerCredentials(const RouterServerOptions& options,
                                                            const RouterTlsMaterial& tls) {
  if (!options.worker_tls_enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.worker_ca_pem;
  ssl.pem_private_key = tls.worker_private_key_pem;
  ssl.pem_cert_chain = tls.worker_cert_chain_pem;
  return grpc::SslCredentials(ssl);
}

std::string DefaultRouterId() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat("router-", host, "-", getpid());
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Start(
    const RouterServerOptions& options) {
  // A port in use fails now, not after the tokenizer loaded.
  KVSERVE_RETURN_IF_ERROR(
      CheckServingPorts(options.listen, options.metrics_listen, options.http_port));
  std::unique_ptr<RouterServer> server(new RouterServer());
  KVSERVE_ASSIGN_OR_RETURN(RouterTlsMaterial tls, LoadRouterTls(options));
  if (!options.auth_tokens_file.empty()) {
    absl::StatusOr<std::string> contents =
        ReadFlagFile("--auth_tokens_file", options.auth_tokens_file);
    if (!contents.ok()) return contents.status();
    KVSERVE_ASSIGN_OR_RETURN(TokenAuth auth, TokenAuth::Parse(*contents));
    server->auth_ = std::move(auth);
  }
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PromptRenderer> renderer,
                           PromptRenderer::Load(options.model, options.chat_template));
  server->renderer_ = std::move(renderer);

  server->metrics_ = std::make_unique<RouterMetrics>();
  KVSERVE_ASSIGN_OR_RETURN(server->metrics_server_, MetricsServer::Start(options.metrics_listen));
  server->metrics_server_->Register(server->metrics_->registry());
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<ClusterBooks> books, ClusterBooks::Create(options.core));
  server->books_ = std::move(books);
  server->queue_ = std::make_unique<AdmissionQueue>(server->books_.get(), options.core.admission);

  const std::string router_id = options.router_id.empty() ? DefaultRouterId() : options.router_id;
  WorkerConnectionOptions connection;
  connection.router_id = router_id;
  connection.status_interval_ms = options.status_interval_ms;
  connection.liveness_timeout = absl::Seconds(options.worker_liveness_timeout_s);
  connection.stream_progress_timeout = absl::Seconds(options.stream_progress_timeout_s);
  connection.fingerprint =
      ServingFingerprintOf(server->renderer_->tokenizer(), options.core.block_size);
  connection.on_books_changed = [books = server->books_.get(), metrics = server->metrics_.get(),
                                 queue = server->queue_.get()] {
    metrics->SetWorkers(books->Workers());
    metrics->SetQueueDepth(queue->num_waiting());
  };
  server->registry_ = std::make_unique<WorkerRegistry>(
      server->books_.get(), WorkerCredentials(options, tls), std::move(connection));
  if (!options.workers.empty()) {
    server->registry_->SetAddresses(StaticWorkerAddresses(options));
  } else if (absl::Status s = server->registry_->StartDns(options.workers_dns,
                                                          absl::Seconds(options.dns_refresh_s));
             !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--workers_dns: ", s.message()));
  }

  server->proxy_ = std::make_unique<GenerateProxy>(server->registry_.get(), server->books_.get(),
                                                   server->queue_.get(), server->metrics_.get(),
                                                   options.max_migrations);
  server->api_ = std::make_unique<RouterApi>(router_id, &server->auth_, server->renderer_.get(),
                                             server->registry_.get(), server->books_.get(),
                                             server->metrics_.get());
  server->service_ = std::make_unique<RouterService>(server->api_.get(), server->proxy_.get());
  server->admin_service_ = std::make_unique<RouterAdminService>(
      &server->auth_, server->books_.get(), server->metrics_.get());

  EnableHealthAndReflection();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, ServerCredentials(options, tls), &server->grpc_port_);
  builder.RegisterService(server->service_.get());
  builder.RegisterService(server->admin_service_.get());
  KVSERVE_ASSIGN_OR_RETURN(server->server_,
                           StartGrpcServer(builder, options.listen, server->grpc_port_));
  // "" and the services' own names, so probes can ask for any.
  server->server_->GetHealthCheckService()->SetServingStatus("kvserve.v1.Generation", true);
  server->server_->GetHealthCheckService()->SetServingStatus("kvserve.v1.RouterAdmin", true);
  if (options.http_port >= 0) {
    KVSERVE_RETURN_IF_ERROR(server->StartHttp(options));
  }
  return server;
}

absl::Status RouterServer::StartHttp(const RouterServerOptions& options) {
  http_backend_ = std::make_unique<RouterHttpBackend>(api_.get(), proxy_.get());
  KVSERVE_ASSIGN_OR_RETURN(
      http_, OpenAiHttpService::Start(http_backend_.get(), options.listen, options.http_port,
                                      options.http_model_aliases, metrics_server_.get()));
  return absl::OkStatus();
}

void RouterServer::Drain(absl::Duration timeout) {
  if (drained_) return;
  drained_ = true;
  server_->GetHealthCheckService()->SetServingStatus(false);
  if (http_backend_ != nullptr) http_backend_->StopServing();
  const absl::Time deadline = absl::Now() + timeout;
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  // gRPC's calls are done; HTTP calls get what is left of the timeout. Those still open then
  // end here (their worker calls are cancelled), before the workers go.
  if (http_ != nullptr) {
    proxy_->WaitIdle(deadline);
    http_->Stop();
  }
  registry_->Stop();
}

RouterServer::~RouterServer() {
  if (server_ != nullptr) Drain(absl::ZeroDuration());
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  if (registry_ != nullptr) registry_->Stop();
}

}  // namespace kvserve
