// WorkerOptions: everything kvserve-worker is configured with, as one plain struct. main() fills
// it from absl flags (the flag of each field is named in its comment) and calls Validate() once
// before anything starts; a bad value stops the process with a message that names the flag.
//
// Addresses are "host:port"; port 0 asks the OS for a free port (main prints the one bound).
// TLS: with --tls_cert and --tls_key the gRPC port serves TLS; adding --tls_ca also requires
// and verifies a client certificate signed by that CA (mTLS). The files are read by
// LoadTlsFiles(), so a missing or unreadable file is also a start-up error naming its flag.
//
// Thread-safety: a plain value.
#ifndef KVSERVE_WORKER_WORKER_OPTIONS_H_
#define KVSERVE_WORKER_WORKER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/engine_options.h"  // kAutoStepTimeTarget
#include "runner/fake_model_runner.h"

namespace kvserve {

struct WorkerOptions {
  std::string model;  // --model: GGUF path, HF directory or synthetic:...
  // --served_model_name: the model's id (ModelInfo.name, the OpenAI "model"); main() fills in
  // DefaultServedModelName(model) when the flag is empty. Empty here: the config's name. The
  // model file's own name, when it differs, is accepted as an alias (ModelInfo.aliases).
  std::string served_model_name;
  int32_t block_size = 16;  // --block_size: tokens per KV block
  // --kv_memory_bytes: KV pool budget; 0: what the device has left after a profiling step
  // (--gpu_memory_utilization).
  int64_t kv_memory_bytes = 256ll << 20;
  // --host_kv_bytes: host memory for the host KV tier (per rank); 0: no host tier.
  int64_t host_kv_bytes = 0;
  // --preemption_mode: "recompute", or "swap" (a preempted request's partial last block is kept
  // in the host tier too; needs --host_kv_bytes).
  std::string preemption_mode = "recompute";
  // --defer_host_loads: a request whose blocks load from the host tier sits out that step, so
  // the loads overlap the others' forward (EngineOptions::defer_host_loads).
  bool defer_host_loads = true;
  int32_t max_num_seqs = 64;                // --max_num_seqs: running sequences per step
  int32_t max_num_batched_tokens = 2048;    // --max_num_batched_tokens: token budget per step
  int32_t max_prefill_tokens_per_step = 0;  // --max_prefill_tokens_per_step: 0 = no cap
  // --step_time_target_ms: kAutoStepTimeTarget (-1) = automatic, 0 = off
  double step_time_target_ms = kAutoStepTimeTarget;
  int32_t max_queue_wait_ms = 1000;               // --max_queue_wait_ms: 0 = no queue-wait rule
  std::string listen = "127.0.0.1:50061";         // --listen: gRPC host:port
  std::string metrics_listen = "127.0.0.1:9461";  // --metrics_listen: /metrics host:port
  std::string tls_cert;                           // --tls_cert: PEM server certificate chain
  std::string tls_key;                            // --tls_key: PEM private key
  std::string tls_ca;                             // --tls_ca: PEM CA for client certificates (mTLS)
  double drain_timeout_s = 30.0;  // --drain_timeout_s: SIGTERM grace for in-flight work
  // --drain_kv_handoff_s: after the grace period, requests still running end (the router
  // migrates them) and the worker keeps serving their KV blocks this long before it stops, so
  // that their new workers fetch rather than recompute them; 0: stop at once.
  double drain_kv_handoff_s = 2.0;
  // --kv_fetch_timeout_s: the longest a request given a kv_source waits for its blocks from
  // the other worker (what arrived by then is kept; the rest is computed); 0: never fetch.
  double kv_fetch_timeout_s = 5.0;
  std::string worker_id;               // --worker_id: empty = the bound host:port
  int32_t max_waiting_requests = 256;  // --max_waiting_requests: queued past it -> refused
  // --http_port: the OpenAI-compatible HTTP API on the host of --listen; -1: off, 0: any free
  // port.
  int32_t http_port = -1;
  std::string http_api_key;                     // --http_api_key: bearer token HTTP needs
  std::vector<std::string> http_model_aliases;  // --http_model_aliases: other model names
  // --structured_output_timeout_s: how long a request waits for its JSON schema, regex or
  // grammar to compile; past it, DEADLINE_EXCEEDED (the compile finishes in the background and
  // is cached for a retry).
  double structured_output_timeout_s = 10.0;
  // --tensor_parallel_size: ranks of the group this process leads (WorkerIdentity, ModelInfo).
  int32_t tensor_parallel_size = 1;
  std::string step_log;  // --step_log: a CSV line per engine step (WorkerMetrics::OpenStepLog)
  // --chat_template: a Jinja file that replaces the model's chat template; empty: the model's.
  std::string chat_template;

  // OK, or INVALID_ARGUMENT whose message starts with the flag, e.g.
  // "--block_size: must be a power of two in [1, 256], got 12". Reads and parses the
  // --chat_template file, so a bad one stops the worker before its weights load.
  absl::Status Validate() const;
  bool tls_enabled() const { return !tls_cert.empty(); }
};

// The contents of the TLS files named by the options.
struct TlsMaterial {
  std::string cert_chain_pem;
  std::string private_key_pem;
  std::string client_ca_pem;  // empty: no client certificate required
};

// Reads the files; INVALID_ARGUMENT naming the flag when one cannot be read or is empty.
// REQUIRES: options.Validate().ok() and options.tls_enabled()
absl::StatusOr<TlsMaterial> LoadTlsFiles(const WorkerOptions& options);

// A --step_time_model file: a JSON object with the StepTimeModel fields (fixed_ms,
// prefill_token_ms, decode_token_ms, prefill_attention_ms_per_mtoken,
// decode_attention_ms_per_mtoken; each a number >= 0, absent: 0)
// and any other keys (e.g. "source") ignored. INVALID_ARGUMENT naming the flag and the field.
absl::StatusOr<StepTimeModel> ParseStepTimeModel(absl::string_view json_text);

// Splits "host:port" (host may be "[v6]"); INVALID_ARGUMENT naming `flag` when malformed or the
// port is outside [0, 65535].
absl::Status ValidateHostPort(absl::string_view flag, absl::string_view address);

}  // namespace kvserve

#endif  // KVSERVE_WORKER_WORKER_OPTIONS_H_
