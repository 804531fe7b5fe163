// kvserve-worker: serves one model over gRPC (kvserve.v1.Generation and kvserve.v1.Worker,
// grpc.health.v1, reflection) with Prometheus metrics on a second port.
//
//   kvserve-worker --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0
//
// With --http_port it also serves the OpenAI-compatible HTTP API (docs/api.md).
//
// Prints "kvserve-worker grpc_port=N", "kvserve-worker metrics_port=N", with --http_port
// "kvserve-worker http_port=N", and then
// "kvserve-worker ready" on stdout once serving (port 0 picks a free port). SIGTERM or SIGINT
// drains (see worker_server.h) and exits 0.
//
// --tensor_parallel_size=N runs a worker group (tp/tp_group.h): this process is rank 0, the
// leader, and serves; it starts ranks 1..N-1 as children of the same binary, which serve
// nothing and run the leader's steps on their shards. When a rank fails, the leader ends its
// requests with UNAVAILABLE, stops the others and exits 1.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/listen_check.h"
#include "api/program_usage.h"
#include "base/log.h"
#include "base/log_flags.h"
#include "base/status_macros.h"
#include "kernels/backend_factory.h"
#include "model/default_model.h"
#include "model/served_model_name.h"
#include "model/weights_loader.h"
#include "runner/fake_model_runner.h"
#include "runner/fault_injecting_runner.h"
#include "runner/runner_factory.h"
#include "tokenizer/tokenizer.h"
#include "tp/tp_group.h"
#include "worker/worker_options.h"
#include "worker/worker_server.h"

ABSL_FLAG(std::string, model, kvserve::DefaultModelPath(),
          "GGUF file, Hugging Face directory, or synthetic:<preset>[:layers=N][:seed=S]");
ABSL_FLAG(std::string, served_model_name, "",
          "The model's id in the API (ModelInfo.name, the OpenAI \"model\"); empty: the model "
          "file's name without its encoding, e.g. SmolLM2-135M-Instruct for "
          "SmolLM2-135M-Instruct.Q4_1.gguf (the file's own name is accepted too)");
ABSL_FLAG(int32_t, block_size, 16, "Tokens per KV cache block");
ABSL_FLAG(int64_t, kv_memory_bytes, -1,
          "Memory budget of the KV cache pool in bytes; 0: what the device has left after a "
          "profiling step under --gpu_memory_utilization; -1 (default): 0 on CUDA, 256 MiB on "
          "the CPU");
ABSL_FLAG(int64_t, host_kv_bytes, 0,
          "Host memory in bytes for the host KV tier, per rank: cached blocks the KV pool "
          "evicts are kept there and copied back on a prefix hit instead of recomputed; 0: off");
ABSL_FLAG(std::string, device, "cpu", "Where the model runs: cpu, cuda or cuda:N");
ABSL_FLAG(std::string, dtype, "auto",
          "Weight storage: auto (bfloat16 on CUDA; on the CPU as the file stores them, GGUF "
          "blocks included), float32, bfloat16, "
          "float16");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "KV cache storage: auto (the weights' 16-bit type; float16 for GGUF blocks kept as "
          "stored on the CPU; else float32), float32, bfloat16, float16");
ABSL_FLAG(double, gpu_memory_utilization, 0.90,
          "Fraction of the GPU's memory the weights, step buffers and KV cache may take");
ABSL_FLAG(bool, enforce_eager, false, "Run decode steps eagerly (no CUDA graphs)");
ABSL_FLAG(int32_t, max_num_seqs, 64, "Sequences running at once");
ABSL_FLAG(int32_t, max_num_batched_tokens, 2048, "Tokens computed per engine step");
ABSL_FLAG(int32_t, max_prefill_tokens_per_step, 0,
          "Prompt tokens computed in a step that also decodes, so new prompts delay decoding "
          "streams by a bounded amount (0: no cap beyond --max_num_batched_tokens)");
ABSL_FLAG(double, step_time_target_ms, -1,
          "Fill a step that also decodes with prompt tokens up to this estimated duration, "
          "learnt from the steps run (at least a block of tokens per step); -1: automatic, 1.5x "
          "the step's decodes alone and at least 50 ms; 0: off");
ABSL_FLAG(int32_t, max_queue_wait_ms, 1000,
          "A step in which a request has waited this long in the queue takes prompt tokens up "
          "to --max_num_batched_tokens, past the prefill caps (0: never)");
ABSL_FLAG(std::string, listen, "127.0.0.1:50061", "gRPC host:port (port 0: any free port)");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9461", "/metrics host:port (0: any free port)");
ABSL_FLAG(int32_t, http_port, -1,
          "OpenAI-compatible HTTP API port on the host of --listen (-1: off; 0: any free port)");
ABSL_FLAG(std::string, http_api_key, "",
          "Bearer token the HTTP API requires (Authorization: Bearer <key>); empty: none");
ABSL_FLAG(std::vector<std::string>, http_model_aliases, {},
          "Comma-separated model names the HTTP API accepts besides the model's own name");
ABSL_FLAG(int32_t, max_waiting_requests, 256,
          "Requests waiting for the engine at most; more are refused (gRPC RESOURCE_EXHAUSTED, "
          "HTTP 429)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve TLS on --listen");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA: require client certificates signed by it (mTLS)");
ABSL_FLAG(double, drain_timeout_s, 30.0, "On SIGTERM, seconds in-flight requests may take");
ABSL_FLAG(std::string, preemption_mode, "recompute",
          "What a preempted request keeps: recompute (its cached full blocks) or swap (also its "
          "partial last block, in the host tier; needs --host_kv_bytes)");
ABSL_FLAG(bool, defer_host_loads, true,
          "A request whose KV blocks load from the host tier sits out that step, so the loads "
          "overlap the other requests' forward instead of delaying it");
ABSL_FLAG(double, drain_kv_handoff_s, 2.0,
          "After the drain's grace period, seconds the worker keeps serving the KV blocks of the "
          "requests it ended, so their new workers fetch rather than recompute them (0: none)");
ABSL_FLAG(double, kv_fetch_timeout_s, 5.0,
          "Seconds a request the router gave a KV source waits for its blocks from that worker; "
          "what has not arrived by then is computed (0: never fetch)");
ABSL_FLAG(double, structured_output_timeout_s, 10.0,
          "Seconds a request waits for its JSON schema, regex or grammar to compile; past it "
          "DEADLINE_EXCEEDED (the compile goes on and is cached for a retry)");
ABSL_FLAG(std::string, worker_id, "", "Name in StreamStatus (default: the bound host:port)");
ABSL_FLAG(int32_t, num_threads, 0, "CPU kernel threads (0: one per core)");
ABSL_FLAG(int32_t, tensor_parallel_size, 1,
          "Ranks of the worker group, one process each (CPU: each gets its share of "
          "--num_threads; CUDA: rank r uses device r). Rank 0 serves and, unless "
          "--tp_leader_address is set, starts ranks 1..N-1 itself");
ABSL_FLAG(int32_t, tp_rank, 0,
          "This process's rank in the group; > 0: a follower, which serves nothing and joins "
          "--tp_leader_address (set by the leader for the ranks it starts; by hand for groups "
          "across hosts)");
ABSL_FLAG(std::string, tp_leader_address, "",
          "host:port of the leader's rendezvous store. Followers: required. Rank 0: listen there "
          "and wait for followers started by hand; empty: 127.0.0.1 on a free port, followers "
          "started by the leader");
ABSL_FLAG(std::string, tp_hostname, "",
          "Address this rank's connections to the other ranks use (empty: 127.0.0.1 for a "
          "group the leader starts, else this host's name)");
ABSL_FLAG(double, tp_timeout_s, 30.0,
          "Seconds a collective (or the group's start-up) may take before the group is failed");
ABSL_FLAG(std::string, runner, "model",
          "model: run --model's weights; simulated: load only its tokenizer and shape, and run "
          "a fake model whose steps last what --step_time_model says (routing benchmarks)");
ABSL_FLAG(std::string, step_time_model, "",
          "--runner=simulated: JSON file of the step-time model (bench/calibrate_step_time.py)");
ABSL_FLAG(std::string, step_log, "",
          "Append a CSV line per engine step to this file (duration and token counts)");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja file replacing the model's chat template (give kvserve-router the same file)");
ABSL_FLAG(int64_t, fault_fail_step, 0,
          "TESTING AID ONLY, never in production: the model runner fails from engine step N on "
          "(its in-flight requests end with INTERNAL, health turns NOT_SERVING); 0: off");

namespace kvserve {
namespace {

// Exit status 2 when the device asked for is not there (a clear, permanent configuration error
// a supervisor should not retry blindly); 1 for every other failure.
int Fail(const absl::Status& status) {
  std::cerr << "kvserve-worker: " << status << std::endl;
  return status.code() == absl::StatusCode::kFailedPrecondition ? 2 : 1;
}

// argv[1..], which the leader gives its followers.
std::vector<std::string> g_args;

// The flags, as the options of the server, the model runner and the group.
struct Flags {
  WorkerOptions worker;
  RunnerFactoryOptions runner;
  TpGroupOptions tp;
  int64_t fault_fail_step = 0;  // --fault_fail_step
  // --runner=simulated: a FakeModelRunner whose steps last what this says; nullopt: the model.
  std::optional<StepTimeModel> simulated;
};

// Reads the flags and validates them; errors name the flag.
absl::StatusOr<Flags> ReadFlags() {
  Flags flags;
  flags.runner =
      RunnerFactoryOptions{.model = absl::GetFlag(FLAGS_model),
                           .device = absl::GetFlag(FLAGS_device),
                           .dtype = absl::GetFlag(FLAGS_dtype),
                           .kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype),
                           .num_threads = absl::GetFlag(FLAGS_num_threads),
                           .gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization),
                           .enforce_eager = absl::GetFlag(FLAGS_enforce_eager)};
  WorkerOptions& options = flags.worker;
  options.model = absl::GetFlag(FLAGS_model);
  options.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  if (options.served_model_name.empty()) {
    options.served_model_name = DefaultServedModelName(options.model);
  }
  options.block_size = absl::GetFlag(FLAGS_block_size);
  options.kv_memory_bytes = absl::GetFlag(FLAGS_kv_memory_bytes);
  if (options.kv_memory_bytes == -1) {
    options.kv_memory_bytes = kernels::IsCudaDevice(flags.runner.device) ? 0 : 256ll << 20;
  }
  options.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  options.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  options.max_prefill_tokens_per_step = absl::GetFlag(FLAGS_max_prefill_tokens_per_step);
  options.host_kv_bytes = absl::GetFlag(FLAGS_host_kv_bytes);
  options.step_time_target_ms = absl::GetFlag(FLAGS_step_time_target_ms);
  options.max_queue_wait_ms = absl::GetFlag(FLAGS_max_queue_wait_ms);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout_s);
  options.drain_kv_handoff_s = absl::GetFlag(FLAGS_drain_kv_handoff_s);
  options.preemption_mode = absl::GetFlag(FLAGS_preemption_mode);
  options.defer_host_loads = absl::GetFlag(FLAGS_defer_host_loads);
  options.kv_fetch_timeout_s = absl::GetFlag(FLAGS_kv_fetch_timeout_s);
  options.structured_output_timeout_s = absl::GetFlag(FLAGS_structured_output_timeout_s);
  options.worker_id = absl::GetFlag(FLAGS_worker_id);
  options.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  options.http_port = absl::GetFlag(FLAGS_http_port);
  options.http_api_key = absl::GetFlag(FLAGS_http_api_key);
  options.http_model_aliases = absl::GetFlag(FLAGS_http_model_aliases);
  options.chat_template = absl::GetFlag(FLAGS_chat_template);
  KVSERVE_RETURN_IF_ERROR(options.Validate());
  flags.tp = TpGroupOptions{.size = absl::GetFlag(FLAGS_tensor_parallel_size),
                            .rank = absl::GetFlag(FLAGS_tp_rank),
                            .leader_address = absl::GetFlag(FLAGS_tp_leader_address),
                            .hostname = absl::GetFlag(FLAGS_tp_hostname),
                            .timeout_s = absl::GetFlag(FLAGS_tp_timeout_s)};
  KVSERVE_RETURN_IF_ERROR(flags.tp.Validate());
  options.tensor_parallel_size = flags.tp.size;
  flags.fault_fail_step = absl::GetFlag(FLAGS_fault_fail_step);
  options.step_log = absl::GetFlag(FLAGS_step_log);
  const std::string runner = absl::GetFlag(FLAGS_runner);
  if (runner == "simulated") {
    if (flags.tp.size != 1) {
      return absl::InvalidArgumentError("--runner=simulated: needs --tensor_parallel_size=1");
    }
    const std::string path = absl::GetFlag(FLAGS_step_time_model);
    if (path.empty()) return absl::InvalidArgumentError("--step_time_model: required");
    std::ifstream file(path, std::ios::binary);
    if (!file) {
      return absl::InvalidArgumentError(absl::StrCat("--step_time_model: cannot read ", path));
    }
    std::ostringstream text;
    text << file.rdbuf();
    KVSERVE_ASSIGN_OR_RETURN(flags.simulated, ParseStepTimeModel(text.str()));
  } else if (runner != "model") {
    return absl::InvalidArgumentError(
        absl::StrCat("--runner: must be model or simulated, got '", runner, "'"));
  }
  return flags;
}

// Blocks SIGTERM and SIGINT: every thread started from here on inherits the mask, and main
// waits for them (WaitForStop).
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The runner factory names a bad --model / --device / ... as "model: ..."; say it as the flag.
absl::Status AsFlagError(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kNotFound ||
      status.code() == absl::StatusCode::kInvalidArgument) {
    return absl::Status(status.code(), absl::StrCat("--", status.message()));
  }
  return status;
}

// A simulated worker: the model's tokenizer and shape, a fake runner with its step times. The
// pool holds as many blocks as the real worker's would: 16-bit K/V (what --kv_cache_dtype=auto
// gives for GGUF blocks on the CPU and for 16-bit weights), float32 with
// --kv_cache_dtype=float32.
absl::StatusOr<std::unique_ptr<WorkerServer>> StartSimulatedServer(const Flags& flags) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(flags.worker.model);
  if (!config.ok()) return AsFlagError(config.status());
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           Tokenizer::FromModelPath(flags.worker.model));
  // Plain lowercase words that tokenize back to themselves: what the fake model says.
  std::vector<int32_t> words;
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    const std::string text = tokenizer->Decode(std::vector<int32_t>{id});
    if (text.size() < 3 || text.size() > 12 || text[0] != ' ' ||
        !std::all_of(text.begin() + 1, text.end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
      continue;
    }
    if (tokenizer->Encode(text, /*add_bos=*/false) == std::vector<int32_t>{id}) words.push_back(id);
  }
  FakeModelOptions fake{.vocab_size = config->vocab_size,
                        .max_context_len = config->max_context,
                        .eos_token_ids = config->eos_token_ids,
                        .kv_bytes_per_token = int64_t{2} * config->num_layers *
                                              config->num_kv_heads * config->head_dim *
                                              (flags.runner.kv_cache_dtype == "float32" ? 4 : 2),
                        .step_time = *flags.simulated,
                        .output_token_ids = std::move(words)};
  std::cout << "kvserve-worker device=simulated step_time_model=" << fake.step_time.fixed_ms
            << "ms+" << fake.step_time.prefill_token_ms << "ms/prefill_token+"
            << fake.step_time.decode_token_ms << "ms/decode_token+"
            << fake.step_time.prefill_attention_ms_per_mtoken << "ms/M_prefill_attended+"
            << fake.step_time.decode_attention_ms_per_mtoken << "ms/M_decode_context"
            << " output_words=" << fake.output_token_ids.size() << std::endl;
  return WorkerServer::Start(flags.worker, std::make_unique<FakeModelRunner>(fake),
                             std::move(tokenizer), *config);
}

// Rank 0's serving side: its model runner (wrapped for the group, and for --fault_fail_step),
// the tokenizer and the WorkerServer, whose metrics take the group's step times.
absl::StatusOr<std::unique_ptr<WorkerServer>> StartServer(const Flags& flags, TpGroup& group) {
  if (flags.simulated.has_value()) return StartSimulatedServer(flags);
  absl::StatusOr<CreatedRunner> created = CreateLlamaRunner(group.RankOptions(flags.runner));
  if (!created.ok()) return AsFlagError(created.status());
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           Tokenizer::FromModelPath(flags.worker.model));
  std::cout << "kvserve-worker device=" << created->backend_name
            << " weights=" << created->weight_types << " (" << created->weight_bytes
            << " bytes) kv_cache=" << KvDtypeName(created->kv_dtype) << std::endl;
  std::unique_ptr<ModelRunner> model_runner = group.WrapRunner(std::move(created->runner));
  if (flags.fault_fail_step > 0) {
    model_runner =
        std::make_unique<FaultInjectingRunner>(std::move(model_runner), flags.fault_fail_step);
  }
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<WorkerServer> server,
                           WorkerServer::Start(flags.worker, std::move(model_runner),
                                               std::move(tokenizer), created->config));
  WorkerMetrics* metrics = &server->metrics();
  group.SetStepSink([metrics](absl::Duration broadcast, absl::Duration all_reduce) {
    metrics->RecordTensorParallelStep(broadcast, all_reduce);
  });
  return server;
}

void PrintReady(const WorkerServer& server) {
  std::cout << "kvserve-worker grpc_port=" << server.grpc_port() << "\n"
            << "kvserve-worker metrics_port=" << server.metrics_port() << "\n";
  if (server.http_port() >= 0) {
    std::cout << "kvserve-worker http_port=" << server.http_port() << "\n";
  }
  std::cout << "kvserve-worker worker_id=" << server.worker_id() << "\n"
            << "kvserve-worker kv_blocks=" << server.num_kv_blocks() << "\n"
            << "kvserve-worker ready" << std::endl;
}

// Waits for a signal of `signals` (its number), or (a group) for a rank to fail (its failure).
absl::StatusOr<int> WaitForStop(const sigset_t& signals, TpGroup& group) {
  while (true) {
    const timespec poll{.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
    const int signal_number = sigtimedwait(&signals, nullptr, &poll);
    if (signal_number > 0) return signal_number;
    KVSERVE_RETURN_IF_ERROR(group.Health());
  }
}

// Drains the server and stops the group once WaitForStop returned `stop`; the exit status.
int DrainAndStop(const absl::StatusOr<int>& stop, double drain_timeout_s,
                 std::unique_ptr<WorkerServer> server, TpGroup& group) {
  if (!stop.ok()) {
    // Ends what is in flight with UNAVAILABLE (the router migrates it), then the other ranks.
    std::cerr << "kvserve-worker: " << stop.status() << "; stopping the group" << std::endl;
    KVSERVE_LOG(kError, "worker_group_failed").Status(stop.status());
    server->Drain(absl::ZeroDuration());
    group.Kill();
    server.reset();
    return 1;
  }
  std::cout << "kvserve-worker draining (signal " << *stop << ")" << std::endl;
  const bool clean = server->Drain(absl::Seconds(drain_timeout_s));
  std::cout << "kvserve-worker stopped"
            << (clean ? "" : " (drain timeout: unfinished requests ended with UNAVAILABLE)")
            << std::endl;
  const bool group_clean = group.Stop();  // before the runner (in the server) goes
  server.reset();
  return group_clean ? 0 : 1;
}

bool RunFollower(const TpGroupOptions& tp, const RunnerFactoryOptions& runner_options);

// Flags, then the group and the server, then wait, then drain.
int Run() {
  absl::StatusOr<Flags> flags = ReadFlags();
  if (!flags.ok()) return Fail(flags.status());
  if (flags->tp.rank > 0) return RunFollower(flags->tp, flags->runner) ? 0 : 1;

  // A port in use fails now, not after the model loaded.
  if (absl::Status s = CheckServingPorts(flags->worker.listen, flags->worker.metrics_listen,
                                         flags->worker.http_port);
      !s.ok()) {
    return Fail(s);
  }
  const sigset_t signals = BlockStopSignals();
  // A group: start the followers (before any thread but the store's) and join them.
  absl::StatusOr<std::unique_ptr<TpGroup>> group = TpGroup::Start(flags->tp, flags->runner, g_args);
  if (!group.ok()) return Fail(group.status());
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = StartServer(*flags, **group);
  if (!server.ok()) return Fail(server.status());
  PrintReady(**server);
  return DrainAndStop(WaitForStop(signals, **group), flags->worker.drain_timeout_s,
                      *std::move(server), **group);
}

// A follower: join the group, load the shard, run the leader's steps until told to stop.
bool RunFollower(const TpGroupOptions& tp, const RunnerFactoryOptions& runner_options) {
  absl::Status status = RunTensorParallelFollowerProcess(tp, runner_options);
  if (!status.ok()) {
    std::cerr << "kvserve-worker tp_rank=" << tp.rank << ": " << status << std::endl;
    return false;
  }
  std::cout << "kvserve-worker tp_rank=" << tp.rank << " stopped" << std::endl;
  return true;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::SetProgramUsage("Serves an LLM over gRPC (kvserve.v1) with Prometheus metrics.");
  kvserve::g_args.assign(argv + 1, argv + argc);
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = kvserve::ApplyLogFlags(); !s.ok()) {
    std::cerr << "kvserve-worker: " << s.message() << std::endl;
    return 1;
  }
  return kvserve::Run();
}
