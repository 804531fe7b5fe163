// RequestState and Sequence: the engine's bookkeeping of a live request and of the sequences the
// scheduler runs for it.
//
// A request with one choice runs as one sequence: prompt + that choice's tokens. A request with
// several choices whose prompt spans at least one full KV block first runs a "prefix" sequence
// over the prompt's full blocks (choice -1); once computed it is forked (KvCacheManager::
// ForkSequence) into one sequence per choice that share those blocks, and freed. Other requests
// with several choices run one sequence per choice from the start.
//
// Thread-safety: engine thread only.
#ifndef KVSERVE_ENGINE_SEQUENCE_H_
#define KVSERVE_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "engine/choice_state.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/step_plan.h"
#include "kvcache/types.h"

namespace kvserve {

struct RequestState {
  EngineRequest request;
  std::shared_ptr<RequestStream> stream;
  StopRules stop_rules;
  std::vector<std::unique_ptr<ChoiceState>> choices;  // the choices this engine runs
  absl::Time submit_time;
  std::optional<absl::Time> first_scheduled_time;
  std::optional<absl::Time> first_token_time;
  int32_t cached_prompt_tokens = 0;  // from the first admission of the first sequence
  bool cached_prompt_tokens_known = false;
  int32_t num_live_sequences = 0;  // sequences not finished
  int32_t num_preemptions = 0;     // times one of its sequences was preempted

  // SamplingOptions.prompt_logprobs: the scores of prompt tokens 1, 2, ... computed so far, in
  // order (the sequence of the first choice computes them), and whether they were delivered.
  std::vector<SampledToken> prompt_scores;
  bool prompt_logprobs_delivered = false;

  bool wants_prompt_logprobs() const { return request.sampling.prompt_logprobs.has_value(); }
  bool prompt_scores_complete() const {
    return prompt_scores.size() + 1 >= request.prompt_token_ids.size();
  }

  // Context tokens computed (or found cached) of the sequence last admitted or stepped, for
  // progress reports; and when the request's stream last got a message (or the submit time).
  int32_t num_computed_context_tokens = 0;
  absl::Time last_message_time;
};

enum class SequenceStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  SequenceId id = 0;
  RequestState* request = nullptr;
  int32_t choice = -1;          // index into request->choices; -1: the shared prompt prefix
  std::vector<TokenId> tokens;  // every known token: prompt (or its prefix) + generated
  int32_t num_computed_tokens = 0;
  SequenceStatus status = SequenceStatus::kWaiting;
  SequenceSampling sampling;
  // What the runner knows of this sequence (step_plan.h deltas); reset on preemption.
  bool runner_knows = false;
  int32_t runner_num_tokens = 0;
  int32_t runner_num_blocks = 0;
  int64_t admit_order = 0;  // larger: admitted more recently
  // When it last entered the waiting queue (added, or preempted): the queue-wait rule's clock.
  absl::Time waiting_since = absl::InfinitePast();

  bool is_prefix() const { return choice < 0; }
  int32_t num_uncomputed() const {
    return static_cast<int32_t>(tokens.size()) - num_computed_tokens;
  }
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_SEQUENCE_H_
