#include "worker/worker_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/grpc_server.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "http/metrics_server.h"
#include "tokenizer/chat_template.h"

namespace kvserve {
namespace {

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const WorkerOptions& options) {
  if (!options.tls_enabled()) return grpc::InsecureServerCredentials();
  KVSERVE_ASSIGN_OR_RETURN(TlsMaterial tls, LoadTlsFiles(options));
  return TlsServerCredentials(tls.cert_chain_pem, tls.private_key_pem, tls.client_ca_pem);
}

// How this worker reaches the others' FetchKvBlocks: as it is reached itself. With TLS it
// presents its own certificate and verifies theirs against --tls_ca (one CA signs the
// cluster's certificates), or the system roots without one.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerCredentials(
    const WorkerOptions& options) {
  if (!options.tls_enabled()) return grpc::InsecureChannelCredentials();
  KVSERVE_ASSIGN_OR_RETURN(TlsMaterial tls, LoadTlsFiles(options));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls.client_ca_pem;
  ssl.pem_private_key = tls.private_key_pem;
  ssl.pem_cert_chain = tls.cert_chain_pem;
  return grpc::SslCredentials(ssl);
}

// "host:port" with the port replaced by the bound one.
std::string WithPort(const std::string& address, int port) {
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

// Engine::Create names a bad option as "kv_memory_bytes: ..."; say it as the flag it came from.
absl::Status NameTheFlag(const absl::Status& status) {
  for (absl::string_view flag :
       {"block_size", "kv_memory_bytes", "host_kv_bytes", "max_num_seqs", "max_num_batched_tokens",
        "max_prefill_tokens_per_step", "step_time_target_ms", "max_queue_wait_ms"}) {
    if (absl::StartsWith(status.message(), absl::StrCat(flag, ":"))) {
      return absl::Status(status.code(), absl::StrCat("--", status.message()));
    }
  }
  return status;
}

}  // namespace

EngineOptions ToEngineOptions(const WorkerOptions& options) {
  EngineOptions engine;
  engine.block_size = options.block_size;
  engine.kv_memory_bytes = options.kv_memory_bytes;
  engine.host_kv_bytes = options.host_kv_bytes;
  engine.preemption_mode =
      options.preemption_mode == "swap" ? PreemptionMode::kSwap : PreemptionMode::kRecompute;
  engine.defer_host_loads = options.defer_host_loads;
  engine.max_num_seqs = options.max_num_seqs;
  engine.max_num_batched_tokens = options.max_num_batched_tokens;
  engine.max_prefill_tokens_per_step = options.max_prefill_tokens_per_step;
  engine.step_time_target_ms = options.step_time_target_ms;
  engine.max_queue_wait_ms = options.max_queue_wait_ms;
  engine.max_n = std::min(engine.max_n, options.max_num_seqs);
  engine.max_waiting_requests = options.max_waiting_requests;
  return engine;
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(
    const WorkerOptions& options, std::unique_ptr<ModelRunner> runner,
    std::unique_ptr<Tokenizer> tokenizer, const ModelConfig& config) {
  std::unique_ptr<WorkerServer> server(new WorkerServer());
  KVSERVE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                           ServerCredentials(options));

  if (!options.chat_template.empty()) {
    // Before anything shares the tokenizer: the renderer and the fingerprint take this template.
    if (tokenizer == nullptr) {
      return absl::InvalidArgumentError("--chat_template: the model has no tokenizer");
    }
    KVSERVE_ASSIGN_OR_RETURN(std::string jinja, ReadChatTemplateFile(options.chat_template));
    tokenizer->SetChatTemplate(std::move(jinja));
  }
  server->tokenizer_ = std::move(tokenizer);
  server->metrics_ = std::make_shared<WorkerMetrics>();
  KVSERVE_ASSIGN_OR_RETURN(server->metrics_server_, MetricsServer::Start(options.metrics_listen));
  server->metrics_server_->Register(server->metrics_);
  if (!options.step_log.empty()) {
    KVSERVE_RETURN_IF_ERROR(server->metrics_->OpenStepLog(options.step_log));
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(ToEngineOptions(options), std::move(runner), server->tokenizer_.get(),
                     server->metrics_.get());
  if (!engine.ok()) return NameTheFlag(engine.status());
  server->engine_ = *std::move(engine);
  server->engine_->SetFailureListener([raw = server.get()](const absl::Status& failure) {
    KVSERVE_LOG(kError, "engine_failed").Status(failure);
    raw->OnEngineFailed();
  });
  KVSERVE_RETURN_IF_ERROR(server->engine_->Start());
  server->metrics_->SetStatsSource([engine = server->engine_.get()] { return engine->Stats(); });

  EnableHealthAndReflection();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &server->grpc_port_);
  // Routers ping every second to detect a frozen worker (router/worker_connection.h); allow it.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  ModelConfig served = config;
  std::vector<std::string> model_aliases;
  if (!options.served_model_name.empty()) {
    served.name = options.served_model_name;
    if (!config.name.empty() && config.name != served.name) model_aliases.push_back(config.name);
  }
  server->context_ = std::make_unique<ServingContext>(
      server->engine_.get(), server->tokenizer_.get(), served, std::move(model_aliases),
      options.worker_id, server->metrics_.get(), options.tensor_parallel_size,
      absl::Seconds(options.structured_output_timeout_s));
  if (options.kv_fetch_timeout_s > 0) {
    KVSERVE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> peers,
                             PeerCredentials(options));
    server->kv_fetcher_ =
        std::make_unique<KvFetcher>(server->engine_.get(), std::move(peers), server->metrics_.get(),
                                    absl::Seconds(options.kv_fetch_timeout_s));
    server->context_->SetKvFetcher(server->kv_fetcher_.get());
  }
  server->kv_handoff_ = absl::Seconds(options.drain_kv_handoff_s);
  server->generation_service_ = std::make_unique<GenerationService>(server->context_.get());
  server->worker_service_ = std::make_unique<WorkerService>(server->context_.get());
  builder.RegisterService(server->generation_service_.get());
  builder.RegisterService(server->worker_service_.get());
  KVSERVE_ASSIGN_OR_RETURN(server->server_,
                           StartGrpcServer(builder, options.listen, server->grpc_port_));
  {
    absl::MutexLock lock(&server->health_mu_);
    server->health_ready_ = true;
    grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService();
    for (const char* service : {"", "kvserve.v1.Generation", "kvserve.v1.Worker"}) {
      health->SetServingStatus(service, !server->engine_failed_);
    }
  }
  server->worker_id_ =
      options.worker_id.empty() ? WithPort(options.listen, server->grpc_port_) : options.worker_id;
  server->context_->SetWorkerId(server->worker_id_);

  if (options.http_port >= 0) {
    KVSERVE_RETURN_IF_ERROR(server->StartHttp(options));
  }
  return server;
}

absl::Status WorkerServer::StartHttp(const WorkerOptions& options) {
  http_backend_ = std::make_unique<WorkerHttpBackend>(
      context_.get(), [this] { return serving(); }, options.http_api_key);
  KVSERVE_ASSIGN_OR_RETURN(
      http_, OpenAiHttpService::Start(http_backend_.get(), options.listen, options.http_port,
                                      options.http_model_aliases, metrics_server_.get()));
  return absl::OkStatus();
}

bool WorkerServer::serving() {
  absl::MutexLock lock(&health_mu_);
  return health_ready_ && !engine_failed_ && !context_->draining();
}

void WorkerServer::OnEngineFailed() {
  absl::MutexLock lock(&health_mu_);
  engine_failed_ = true;
  if (health_ready_) server_->GetHealthCheckService()->SetServingStatus(false);
}

bool WorkerServer::Drain(absl::Duration timeout) {
  if (drained_) return true;
  drained_ = true;
  const absl::Time start = absl::Now();
  KVSERVE_LOG(kInfo, "drain_started").FieldMs("timeout_ms", timeout);
  context_->SetDraining();
  {
    absl::MutexLock lock(&health_mu_);
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  engine_->StopAccepting();
  const bool idle = engine_->WaitIdle(timeout);
  if (!idle && kv_handoff_ > absl::ZeroDuration() && !engine_->kv_transfer_format().empty()) {
    // Hand over rather than drop: the requests left end now (the router migrates them), and
    // their full blocks stay cached here while their new workers fetch them. The status streams
    // stay open meanwhile, so routers still see what this worker holds.
    engine_->AbortAll(absl::UnavailableError(
        "the worker drained past its grace period; resume elsewhere (its KV blocks can be "
        "fetched for a while)"));
    engine_->WaitIdle(absl::Seconds(1));
    absl::SleepFor(kv_handoff_);
  }
  // Ends what is left with UNAVAILABLE and closes the status streams, so every call finishes.
  engine_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_->Wait();
  if (http_ != nullptr) http_->Stop();
  // clean=false: requests still running at the timeout ended with UNAVAILABLE (a router moves
  // them).
  KVSERVE_LOG(kInfo, "drain_finished").Field("clean", idle).FieldMs("took_ms", absl::Now() - start);
  return idle;
}

WorkerServer::~WorkerServer() {
  if (server_ != nullptr) Drain(absl::ZeroDuration());
  if (metrics_server_ != nullptr) metrics_server_->Stop();
}

int32_t WorkerServer::num_kv_blocks() const { return engine_->num_kv_blocks(); }

}  // namespace kvserve
