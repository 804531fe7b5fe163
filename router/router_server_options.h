// RouterServerOptions: everything kvserve-router is configured with, as one plain struct. main()
// fills it from absl flags (each field's comment names its flag) and calls Validate() once before
// anything starts; a bad value stops the process with a message that starts with the flag, e.g.
// "--max_migrations: must be >= 0, got -1".
//
// Workers come from exactly one of --workers (a static "host:port,host:port" list) or
// --workers_dns ("name:port", e.g. a Kubernetes headless Service), which is re-resolved every
// --dns_refresh_s seconds. TLS on the router's port: --tls_cert + --tls_key (plus --tls_ca to
// require client certificates: mTLS). As a client of the workers: --worker_tls_ca (verify the
// workers' certificates) plus optionally --worker_tls_cert / --worker_tls_key (present a client
// certificate to workers that require mTLS). LoadRouterTls() reads the files, so a missing or
// empty file is also a start-up error naming its flag.
//
// Thread-safety: plain values.
#ifndef KVSERVE_ROUTER_ROUTER_SERVER_OPTIONS_H_
#define KVSERVE_ROUTER_ROUTER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/flag_file.h"
#include "router/router_options.h"

namespace kvserve {

struct RouterServerOptions {
  std::string listen = "127.0.0.1:50051";         // --listen: gRPC host:port (0: a free port)
  std::string metrics_listen = "127.0.0.1:9451";  // --metrics_listen: /metrics host:port
  std::string workers;                            // --workers: "host:port,host:port,..."
  std::string workers_dns;                        // --workers_dns: "name:port"
  double dns_refresh_s = 10.0;                    // --dns_refresh_s: re-resolve period
  std::string model;                              // --model: GGUF / HF dir (tokenizer only)
  std::string chat_template;                      // --chat_template: Jinja file, else the model's
  std::string router_id;                          // --router_id: name sent to workers
  int32_t max_migrations = 3;                     // --max_migrations: per request
  int32_t status_interval_ms = 0;                 // --status_interval_ms: 0 = worker default
  // --worker_liveness_timeout_s: a worker whose status stream is silent this long is taken out
  // of rotation until it publishes again; its streams go on (router/worker_connection.h).
  double worker_liveness_timeout_s = 10.0;
  // --stream_progress_timeout_s: a request stream with no message this long moves elsewhere
  // (its worker sends progress reports every quarter of it while the request has no output).
  double stream_progress_timeout_s = 30.0;
  // --http_port: the OpenAI-compatible HTTP API on the host of --listen (plain HTTP, the same
  // bearer tokens as gRPC); -1: off, 0: any free port.
  int32_t http_port = -1;
  std::vector<std::string> http_model_aliases;  // --http_model_aliases: other model names
  std::string auth_tokens_file;                 // --auth_tokens_file: "token tenant" lines
  std::string tls_cert;                         // --tls_cert: PEM certificate chain
  std::string tls_key;                          // --tls_key: PEM private key
  std::string tls_ca;                           // --tls_ca: PEM CA of client certs (mTLS)
  std::string worker_tls_ca;                    // --worker_tls_ca: PEM CA of worker certs
  std::string worker_tls_cert;                  // --worker_tls_cert: client cert for workers
  std::string worker_tls_key;                   // --worker_tls_key: its private key
  // --block_size, --routing_policy, --max_queue (admission.max_waiting_requests), --kv_transfer
  // (kv_transfer), --transfer_token_cost (weights.transfer_token_cost) and the cost weights.
  RouterCoreOptions core;

  // OK, or INVALID_ARGUMENT whose message starts with the flag at fault. Reads and parses the
  // --chat_template file.
  absl::Status Validate() const;
  bool tls_enabled() const { return !tls_cert.empty(); }
  bool worker_tls_enabled() const { return !worker_tls_ca.empty(); }
};

// The static worker list, split and trimmed. REQUIRES: Validate().ok()
std::vector<std::string> StaticWorkerAddresses(const RouterServerOptions& options);

// The PEM contents of the TLS files.
struct RouterTlsMaterial {
  std::string cert_chain_pem;          // --tls_cert
  std::string private_key_pem;         // --tls_key
  std::string client_ca_pem;           // --tls_ca (empty: no client certificate required)
  std::string worker_ca_pem;           // --worker_tls_ca
  std::string worker_cert_chain_pem;   // --worker_tls_cert
  std::string worker_private_key_pem;  // --worker_tls_key
};

// Reads every TLS file named by the options; INVALID_ARGUMENT naming the flag of a file that
// cannot be read or is empty.
absl::StatusOr<RouterTlsMaterial> LoadRouterTls(const RouterServerOptions& options);

// Splits "host:port" ("[v6]:port" too); INVALID_ARGUMENT naming `flag` when malformed, when the
// port is outside [0, 65535], or (allow_port_zero false) when it is 0.
absl::Status ValidateAddress(absl::string_view flag, absl::string_view address,
                             bool allow_port_zero);

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_SERVER_OPTIONS_H_
