// EngineObserver: the callbacks the engine makes for metrics (the service layer implements them
// with prometheus-cpp; tests record them). Every callback runs on the engine thread, in the
// middle of a step: it must be cheap and must not block or call back into the Engine.
// Default implementations do nothing, so an observer overrides only what it needs.
//
// Thread-safety: called from the engine thread only; an implementation that is read by other
// threads synchronises itself.
#ifndef KVSERVE_ENGINE_ENGINE_OBSERVER_H_
#define KVSERVE_ENGINE_ENGINE_OBSERVER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine_output.h"

namespace kvserve {

struct StepMetrics {
  absl::Duration duration;           // schedule + execute + update
  int32_t num_scheduled_tokens = 0;  // tokens computed by the model this step
  int32_t num_prefill_tokens = 0;    // of those, in prefill chunks
  int32_t num_decode_tokens = 0;     // of those, single-token decodes
  int32_t num_seqs = 0;              // sequences in the step
  // The attention work. Prefill chunks (compute-bound): over those sequences, tokens computed
  // times the context length at the step's end. Decodes (a read of the cache): over those
  // sequences, the context length.
  int64_t num_prefill_attended_tokens = 0;
  int64_t num_decode_context_tokens = 0;
  int32_t num_host_stores = 0;         // blocks copied device -> host tier before the forward
  int32_t num_host_loads = 0;          // blocks copied host tier -> device beside the forward
  bool waited_for_host_loads = false;  // the forward waited for some (StepResult's)
  int32_t num_running_requests = 0;    // after the step
  int32_t num_waiting_requests = 0;    // after the step
};

struct RequestMetrics {
  std::string log_id;   // EngineRequest::log_id (request_id when that is empty)
  absl::Status status;  // how the request ended: OK, or what aborted it
  // The last finishing choice's reason; kAbort when the request was aborted or shut down.
  FinishReason finish_reason = FinishReason::kNone;
  bool aborted = false;  // ended by Abort or Shutdown (not a normal finish)
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // summed over choices
  int32_t cached_prompt_tokens = 0;
  absl::Duration time_to_first_token;  // Submit -> first token of any choice; zero if none
  absl::Duration e2e_latency;          // Submit -> finish
  absl::Duration queue_time;           // Submit -> first scheduled
  int32_t num_preemptions = 0;         // times one of its sequences was preempted
};

class EngineObserver {
 public:
  virtual ~EngineObserver() = default;

  virtual void OnStep(const StepMetrics& /*step*/) {}
  virtual void OnRequestFinished(const RequestMetrics& /*request*/) {}
  // A choice produced a token other than its first: time since its previous token.
  virtual void OnTokenEmitted(absl::Duration /*inter_token_latency*/) {}
  // A running sequence was preempted (its blocks freed, it will be recomputed).
  virtual void OnPreemption() {}
  // A sequence was admitted: query_tokens prompt tokens were looked up in the prefix cache,
  // hit_tokens of them were served from it, host_hit_tokens of those from the host tier.
  virtual void OnPrefixCacheQuery(int64_t /*query_tokens*/, int64_t /*hit_tokens*/,
                                  int64_t /*host_hit_tokens*/) {}
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_ENGINE_OBSERVER_H_
