// ServingContext: what both gRPC services share, between the transport and the engine. It owns
// the request-level logic of the worker: validate a request (request_validation.h), turn its
// input into token ids (PromptRenderer, the router's too), resolve sampling defaults
// (proto_conversion.h), check that it can fit in the KV pool, and submit it to the engine under
// an internal id. It also answers Tokenize / Detokenize / GetModelInfo and knows whether the
// worker is draining (new requests are then refused with UNAVAILABLE).
//
// Every refusal is counted in WorkerMetrics (kvserve_requests_rejected_total).
//
// Thread-safety: thread-safe; the engine, tokenizer and metrics are borrowed and outlive it.
#ifndef KVSERVE_WORKER_SERVING_CONTEXT_H_
#define KVSERVE_WORKER_SERVING_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/request_validation.h"
#include "engine/engine.h"
#include "engine/request_stream.h"
#include "grammar/grammar_compiler.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/worker.pb.h"
#include "model/model_config.h"
#include "tokenizer/prompt_renderer.h"
#include "tokenizer/tokenizer.h"
#include "worker/kv_fetcher.h"
#include "worker/metrics.h"

namespace kvserve {

// A request that reached the engine: its output stream and the id the client sees.
struct StartedRequest {
  std::shared_ptr<RequestStream> stream;
  std::string client_request_id;  // echoed in every GenerateResponse
  std::string engine_request_id;  // for Engine::Abort
};

// ServingContext's default wait for a structured-output compile (--structured_output_timeout_s).
inline constexpr absl::Duration kDefaultConstraintCompileTimeout = absl::Seconds(10);

class ServingContext {
 public:
  // `tokenizer` may be null (token-id input only); `config` describes the served model, and
  // config.name is its id (ModelInfo.name); `model_aliases` are the other names a request may
  // give for it (ModelInfo.aliases).
  // The limits follow the engine: context_length = engine->max_context_len() and the pool size.
  // tensor_parallel_size: ranks of the worker group (WorkerIdentity, ModelInfo).
  // constraint_compile_timeout: how long a request waits for its structured-output constraint
  // to compile (a compile that takes longer carries on and lands in the cache, so a retry finds
  // it); past it the request gets DEADLINE_EXCEEDED.
  ServingContext(Engine* engine, const Tokenizer* tokenizer, const ModelConfig& config,
                 std::vector<std::string> model_aliases, std::string worker_id,
                 WorkerMetrics* metrics, int32_t tensor_parallel_size = 1,
                 absl::Duration constraint_compile_timeout = kDefaultConstraintCompileTimeout);

  // Generation.Generate: validate, tokenize, submit. `metadata_request_id` is the call's
  // x-request-id (gRPC metadata; "" when none): the client's id when request.request_id is empty.
  absl::StatusOr<StartedRequest> StartGenerate(const kvserve::v1::GenerateRequest& request,
                                               absl::string_view metadata_request_id = "");
  // Worker.Generate: validate and submit the router's already tokenized request.
  // `metadata_request_id` is the x-request-id the router sends (its client's request id): the id
  // of the request in this worker's log lines; "" when none (request.request_id then).
  absl::StatusOr<StartedRequest> StartWorkerGenerate(
      const kvserve::v1::WorkerGenerateRequest& request,
      absl::string_view metadata_request_id = "");

  absl::StatusOr<kvserve::v1::TokenizeResponse> Tokenize(
      const kvserve::v1::TokenizeRequest& request) const;
  absl::StatusOr<kvserve::v1::DetokenizeResponse> Detokenize(
      const kvserve::v1::DetokenizeRequest& request) const;
  // NOT_FOUND for another model's name.
  absl::StatusOr<kvserve::v1::ModelInfo> GetModelInfo(absl::string_view model) const;

  // Aborts an engine request (cancel / deadline); a request that already ended is not an error.
  void Abort(const std::string& engine_request_id);

  // Worker.Generate fetches a request's kv_source blocks with `fetcher` before submitting it
  // (kv_fetcher.h); without one (the default) kv_source is ignored. Set before serving.
  void SetKvFetcher(KvFetcher* fetcher) { kv_fetcher_ = fetcher; }

  // Draining: Generate calls are refused with UNAVAILABLE from now on.
  void SetDraining();
  bool draining() const { return draining_.load(std::memory_order_acquire); }

  const ServingLimits& limits() const { return limits_; }
  // Sets WorkerIdentity.worker_id (known only once the port is bound).
  void SetWorkerId(std::string worker_id);
  kvserve::v1::WorkerIdentity identity() const;
  Engine& engine() { return *engine_; }
  WorkerMetrics* metrics() { return metrics_; }

 private:
  absl::StatusOr<StartedRequest> Submit(EngineRequest request, std::string client_request_id);
  // Counts the refusal of request `id`, logs it, returns it.
  absl::Status Rejected(absl::Status status, absl::string_view id);
  // sampling.structured_output compiled into options->constraint (nothing when unset):
  // INVALID_ARGUMENT "sampling.structured_output: ..." for a model without a tokenizer or a
  // schema / regex / grammar that does not compile, DEADLINE_EXCEEDED past
  // kConstraintCompileTimeout.
  absl::Status CompileConstraint(const kvserve::v1::SamplingParams& sampling,
                                 SamplingOptions* options);

  Engine* const engine_;
  const PromptRenderer renderer_;
  WorkerMetrics* const metrics_;
  const absl::Duration constraint_compile_timeout_;
  ServingLimits limits_;
  // Structured output's compiler for this model's vocabulary; null without a tokenizer.
  std::unique_ptr<GrammarCompiler> grammar_;
  KvFetcher* kv_fetcher_ = nullptr;
  kvserve::v1::ModelInfo model_info_;
  mutable absl::Mutex identity_mu_;
  kvserve::v1::WorkerIdentity identity_ ABSL_GUARDED_BY(identity_mu_);
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_request_number_{1};
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_SERVING_CONTEXT_H_
