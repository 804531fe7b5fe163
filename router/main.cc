// kvserve-router: the public kvserve.v1.Generation front end of a cluster of kvserve workers
// (grpc.health.v1 and reflection too), with Prometheus metrics on a second port.
//
//   kvserve-router --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0
//                  --workers=127.0.0.1:50061,127.0.0.1:50062
//
// With --http_port it also serves the OpenAI-compatible HTTP API (docs/api.md).
//
// Prints "kvserve-router grpc_port=N", "kvserve-router metrics_port=N", with --http_port
// "kvserve-router http_port=N", and then
// "kvserve-router ready" on stdout once serving (port 0 picks a free port); then
// "kvserve-router worker_added=host:port" as discovery finds workers. SIGTERM or SIGINT drains
// (--drain_timeout_s) and exits 0. An invalid flag exits 1 with a message naming it.
#include <signal.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/debugging/failure_signal_handler.h"
#include "absl/debugging/symbolize.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/program_usage.h"
#include "base/log_flags.h"
#include "model/default_model.h"
#include "router/router_server.h"
#include "router/router_server_options.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC host:port (port 0: any free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9451", "/metrics host:port (0: any free port)");
ABSL_FLAG(std::string, workers, "", "Static worker list: host:port,host:port,...");
ABSL_FLAG(std::string, workers_dns, "", "Worker DNS name:port (e.g. a headless Service)");
ABSL_FLAG(double, dns_refresh_s, 10.0, "Seconds between re-resolutions of --workers_dns");
ABSL_FLAG(std::string, model, kvserve::DefaultModelPath(),
          "GGUF file or Hugging Face directory: only its tokenizer is loaded");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja file replacing the model's chat template (give the workers the same file)");
ABSL_FLAG(std::string, router_id, "", "Name sent to workers (default: router-<host>-<pid>)");
ABSL_FLAG(int32_t, block_size, 16, "Tokens per KV block; every worker must use the same");
ABSL_FLAG(std::string, routing_policy, "kv_aware",
          "Which fitting worker takes a request: kv_aware (cached prefix, pool usage, queues), "
          "round_robin, least_loaded or random; admission and migration are the same for all");
ABSL_FLAG(bool, kv_transfer, true,
          "Let a worker fetch a request's cached context blocks from another worker (same KV "
          "format, a host tier) when the routing cost says fetching beats computing; false: "
          "never (an A/B switch)");
ABSL_FLAG(double, transfer_token_cost, kvserve::RoutingWeights().transfer_token_cost,
          "Routing cost of one context token fetched from another worker, as a fraction of a "
          "prefill token's (>= 0)");
ABSL_FLAG(int32_t, max_queue, 1024,
          "Requests that may wait for capacity; more: RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_migrations, 3, "Times one request may move to another worker");
ABSL_FLAG(int32_t, status_interval_ms, 0, "Worker status interval asked for (0: worker default)");
ABSL_FLAG(double, worker_liveness_timeout_s, 10.0,
          "A worker whose status stream is silent this long (a hung or starved engine) gets "
          "no new requests until it publishes again; its running ones go on (>= 1)");
ABSL_FLAG(double, stream_progress_timeout_s, 30.0,
          "A request stream with no message from its worker this long moves to another; a "
          "request still prefilling or queued gets progress reports every quarter of it, so "
          "keep it well above one engine step (>= 1)");
ABSL_FLAG(int32_t, http_port, -1,
          "OpenAI-compatible HTTP API port on the host of --listen (-1: off, 0: any free port)");
ABSL_FLAG(std::vector<std::string>, http_model_aliases, {},
          "Model names the HTTP API accepts besides the served one (e.g. gpt-3.5-turbo)");
ABSL_FLAG(std::string, auth_tokens_file, "", "Bearer tokens: lines 'token tenant' (empty: off)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS on --listen");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA: require client certificates signed by it (mTLS)");
ABSL_FLAG(std::string, worker_tls_ca, "", "PEM CA of the workers' certificates: TLS to workers");
ABSL_FLAG(std::string, worker_tls_cert, "", "PEM client certificate for workers (mTLS)");
ABSL_FLAG(std::string, worker_tls_key, "", "PEM private key of --worker_tls_cert");
ABSL_FLAG(double, drain_timeout_s, 30.0, "On SIGTERM, seconds running requests may take");

namespace kvserve {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "kvserve-router: " << status.message() << std::endl;
  return 1;
}

int Run() {
  RouterServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.workers_dns = absl::GetFlag(FLAGS_workers_dns);
  options.dns_refresh_s = absl::GetFlag(FLAGS_dns_refresh_s);
  options.model = absl::GetFlag(FLAGS_model);
  options.chat_template = absl::GetFlag(FLAGS_chat_template);
  options.router_id = absl::GetFlag(FLAGS_router_id);
  options.core.block_size = absl::GetFlag(FLAGS_block_size);
  absl::StatusOr<RoutingPolicy> policy = ParseRoutingPolicy(absl::GetFlag(FLAGS_routing_policy));
  if (!policy.ok()) {
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("--routing_policy: ", policy.status().message())));
  }
  options.core.policy = *policy;
  options.core.kv_transfer = absl::GetFlag(FLAGS_kv_transfer);
  options.core.weights.transfer_token_cost = absl::GetFlag(FLAGS_transfer_token_cost);
  options.core.admission.max_waiting_requests = absl::GetFlag(FLAGS_max_queue);
  options.max_migrations = absl::GetFlag(FLAGS_max_migrations);
  options.status_interval_ms = absl::GetFlag(FLAGS_status_interval_ms);
  options.worker_liveness_timeout_s = absl::GetFlag(FLAGS_worker_liveness_timeout_s);
  options.stream_progress_timeout_s = absl::GetFlag(FLAGS_stream_progress_timeout_s);
  options.http_port = absl::GetFlag(FLAGS_http_port);
  options.http_model_aliases = absl::GetFlag(FLAGS_http_model_aliases);
  options.auth_tokens_file = absl::GetFlag(FLAGS_auth_tokens_file);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.worker_tls_ca = absl::GetFlag(FLAGS_worker_tls_ca);
  options.worker_tls_cert = absl::GetFlag(FLAGS_worker_tls_cert);
  options.worker_tls_key = absl::GetFlag(FLAGS_worker_tls_key);
  const double drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout_s);
  if (absl::Status s = options.Validate(); !s.ok()) return Fail(s);
  if (!(drain_timeout_s >= 0)) {
    return Fail(absl::InvalidArgumentError("--drain_timeout_s: must be >= 0"));
  }

  // Every thread started from here on inherits the blocked signals; main waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<RouterServer>> server = RouterServer::Start(options);
  if (!server.ok()) return Fail(server.status());
  std::cout << "kvserve-router grpc_port=" << (*server)->grpc_port() << "\n"
            << "kvserve-router metrics_port=" << (*server)->metrics_port() << "\n"
            << "kvserve-router routing_policy=" << RoutingPolicyName(options.core.policy) << "\n";
  if ((*server)->http_port() >= 0) {
    std::cout << "kvserve-router http_port=" << (*server)->http_port() << "\n";
  }
  std::cout << "kvserve-router ready" << std::endl;

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  std::cout << "kvserve-router draining (signal " << signal_number << ")" << std::endl;
  (*server)->Drain(absl::Seconds(drain_timeout_s));
  server->reset();
  std::cout << "kvserve-router stopped" << std::endl;
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  // A crash prints its signal and stack to stderr (the pod's log) before the process dies.
  absl::InitializeSymbolizer(argv[0]);
  absl::InstallFailureSignalHandler(absl::FailureSignalHandlerOptions());
  kvserve::SetProgramUsage("Routes kvserve.v1.Generation requests across kvserve workers.");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = kvserve::ApplyLogFlags(); !s.ok()) return kvserve::Fail(s);
  return kvserve::Run();
}
