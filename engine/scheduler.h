// Scheduler: continuous batching over the paged KV cache. Each step it decides which sequences
// compute which tokens, within a token budget (max_num_batched_tokens) and a cap on running
// sequences (max_num_seqs):
//   1. running sequences that decode (one token each), oldest admission first;
//   2. running sequences still in prefill (a chunk each, as the budget allows);
//   3. waiting sequences, front first, while the budget, the cap and the KV pool allow
//      (KvCacheManager::AddSequence attaches the cached prefix, so cached tokens cost nothing).
// A long prompt is thus prefilled in chunks over several steps. A request that wants prompt
// logprobs has its first choice's sequence compute every prompt position (no cached prefix
// attached, no shared prefix sequence) and collects the runner's scores chunk by chunk.
//
// The prefill policy (the default; docs/architecture.md says why). Every decoding stream waits
// for the whole step, so prompt tokens in a step that decodes are what makes the inter-token
// tail:
//   - a step that decodes takes prompt tokens up to the step-time target: step_time_target_ms,
//     by default 1.5x the StepTimeEstimator's time for the step's decodes alone and at least
//     50 ms (at least a block of tokens; the first mixed steps run uncapped and teach it), and
//     at most max_prefill_tokens_per_step when that is set;
//   - the caps give way (the step takes up to max_num_batched_tokens) when the sequences that
//     could be admitted outnumber the step's decodes, since holding them back delays more
//     requests than one long step delays streams (a burst is prefilled at once, and its
//     requests then decode in step), or when one of them has waited max_queue_wait: no request
//     waits behind the caps longer than that and a step;
//   - a waiting sequence whose prompt shares full blocks with one still being prefilled waits
//     until they are computed and then attaches them from the prefix cache (those behind it go
//     ahead meanwhile), so a shared prefix arriving with many requests is computed once;
//   - a step with no decode is not capped: it stalls nobody, unless a live request wants
//     progress reports (SetStepTimeBound): then every step's prompt tokens are paced by the
//     measured step time, so that a long prefill on a slow machine runs as steps short enough
//     for the reports to come in time.
//
// When a running sequence cannot get a block, the most recently admitted running sequence is
// preempted: its blocks are freed (KvCacheManager::PreemptSequence; with swap_preemption its
// partial last block is kept in the host tier) and it goes back to the front of the waiting
// queue with every token it has; nothing new is admitted in that step. Its cached prefix (and a
// kept partial block) spares it most of the recompute when it runs again. Sampling keyed by (seed,
// token index) makes the resumed output the same as without preemption. A sequence admitted with
// blocks to load from the host tier sits out the step that loads them when that step has other work
// (defer_host_loads): the runner overlaps the loads with the others' forward, and nobody waits for
// them.
//
// The scheduler produces a StepPlan (step_plan.h) and applies the StepResult (Update); deciding
// whether a choice finished is the caller's job (EngineCore), which then calls FinishSequence.
//
// Thread-safety: engine thread only.
#ifndef KVSERVE_ENGINE_SCHEDULER_H_
#define KVSERVE_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine_observer.h"
#include "engine/engine_options.h"  // kAutoStepTimeTarget
#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "engine/step_time_estimator.h"
#include "kvcache/kv_cache_manager.h"

namespace kvserve {

struct SchedulerConfig {
  // The automatic target (step_time_target_ms = kAutoStepTimeTarget): this many times the
  // estimated time of the step's decodes alone, and never under kAutoStepTimeFloorMs (a gap a
  // reader does not see).
  static constexpr double kAutoStepTimeRatio = 1.5;
  static constexpr double kAutoStepTimeFloorMs = 50;

  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_prefill_tokens_per_step = 0;  // while some sequence decodes; 0: no cap
  // Ditto, as an estimated step time: > 0 that many ms, kAutoStepTimeTarget (engine_options.h)
  // the default policy, 0 off.
  double step_time_target_ms = kAutoStepTimeTarget;
  // The queue-wait rule: a step in which a waiting sequence has waited this long takes prompt
  // tokens up to max_num_batched_tokens, whatever the caps say. Zero: no such rule.
  absl::Duration max_queue_wait = absl::Seconds(1);
  bool swap_preemption = false;  // KvCacheManager::PreemptSequence's `swap`
  // A sequence admitted with blocks to load from the host tier (a host hit, a swapped block)
  // computes from the next step on when this step has other work, so that the loads run beside
  // this step's forward (runner/host_copies.h) instead of delaying every sequence in it.
  bool defer_host_loads = true;
};

// A token the runner sampled, with the sequence it belongs to.
struct SequenceToken {
  Sequence* sequence = nullptr;
  const SampledToken* sampled = nullptr;  // points into the StepResult given to Update
};

class Scheduler {
 public:
  // `manager` and `observer` (may be null) are borrowed.
  Scheduler(const SchedulerConfig& config, KvCacheManager* manager, EngineObserver* observer);

  // Queues the sequences of a new request at the back of the waiting queue.
  void AddRequest(RequestState* request);

  // Removes every sequence of `request` (waiting or running) and frees its blocks.
  void RemoveRequest(RequestState* request);

  // Plans the next step at time `now` (recorded as a request's first scheduling). The plan may
  // be empty (nothing to run).
  StepPlan Schedule(absl::Time now);

  // Running sequences that could not get a block although nothing else was running (the pool
  // is too small for them to grow); the caller finishes their choices (kLength). Cleared by the
  // call.
  std::vector<Sequence*> TakeStalled();

  // Applies a step's result: commits the computed tokens, appends each sampled token to its
  // sequence, forks finished prefix sequences into their choices. Returns the sampled tokens
  // with their sequences, in plan order. INTERNAL when the result does not match the plan.
  absl::StatusOr<std::vector<SequenceToken>> Update(const StepPlan& plan, const StepResult& result);
  // StepMetrics' attention work of the plan (num_prefill_attended_tokens,
  // num_decode_context_tokens). Call between Schedule and Update.
  void CountAttention(const StepPlan& plan, StepMetrics* metrics) const;

  // A step ran: `decode_tokens` decodes and `prompt_tokens` prompt tokens took `duration`
  // (feeds the step-time estimate behind step_time_target_ms).
  // Also paces prefills under SetStepTimeBound.
  void OnStepDone(int32_t decode_tokens, int32_t prompt_tokens, absl::Duration duration);
  // A step should take at most `bound` (zero: no bound): each step's prompt tokens are then
  // capped at what the last prefilling step's time says fits in half of it (at least a block,
  // and at most max_num_batched_tokens). The engine sets it from its live requests' progress
  // intervals, so that a long prefill on a slow machine runs as steps short enough for its
  // progress reports to come in time (EngineRequest::progress_interval). What the steps taught
  // is kept while no bound is set, so only the engine's first prefilling step runs unpaced.
  void SetStepTimeBound(absl::Duration bound);

  // The sequence's choice finished: frees its blocks now.
  void FinishSequence(Sequence* sequence);

  int32_t num_running_sequences() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting_sequences() const { return static_cast<int32_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Requests with at least one running sequence / with none running but some waiting.
  int32_t num_running_requests() const;
  int32_t num_waiting_requests() const;
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }

 private:
  Sequence* NewSequence(RequestState* request, int32_t choice, std::vector<TokenId> tokens);
  // Weight of a sequence against max_num_seqs: a prefix counts for all its choices.
  int32_t Weight(const Sequence& seq) const;
  // Allocates slots for `num_tokens` more tokens of running `seq`, preempting from the back of
  // running_ when blocks run out. False when `seq` was preempted or stalled.
  bool AllocateOrPreempt(Sequence* seq, int32_t num_tokens, StepPlan* plan);
  void Preempt(Sequence* victim, StepPlan* plan);
  // Admits waiting `seq` with a chunk of at most budget_ tokens; false when blocks lack.
  bool TryAdmit(Sequence* seq, absl::Time now);
  void AddToPlan(Sequence* seq, int32_t num_tokens, StepPlan* plan);
  // Takes `seq` out of running_ (if there) and frees its blocks (as a preemption when
  // `preempted`).
  void RemoveRunning(Sequence* seq, bool preempted = false);
  // Takes `seq` out of running_ or waiting_ and gives back its blocks, kept ones included.
  void Remove(Sequence* seq);
  // The runner must forget seq: in `plan` when given, else in the next plan.
  void Release(Sequence* seq, StepPlan* plan);
  void ForkPrefix(Sequence* prefix);
  // Appends a step's prompt logprobs to the request's (those it has already are skipped).
  absl::Status AddPromptScores(const PromptScores& scores, RequestState* request);
  void Erase(Sequence* seq);
  // Prompt tokens a step with `num_decodes` decodes may add at `now`.
  int32_t PrefillCap(int32_t num_decodes, absl::Time now) const;
  // True when the queue outweighs the step's decodes, or has waited max_queue_wait: the caps
  // give way for this step.
  bool QueueLiftsCap(int32_t num_decodes, absl::Time now) const;
  // True when waiting `seq` shares full prompt blocks with a running sequence that has not
  // computed them yet: it waits for them, then attaches them from the prefix cache.
  bool AwaitsSharedPrefix(const Sequence& seq) const;

  const SchedulerConfig config_;
  KvCacheManager* manager_;
  EngineObserver* observer_;
  absl::flat_hash_map<SequenceId, std::unique_ptr<Sequence>> sequences_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  int32_t running_weight_ = 0;      // sum of Weight over running_
  std::vector<Sequence*> stalled_;
  // The step being planned: (sequence, tokens) in plan order, and the budget left.
  std::vector<std::pair<Sequence*, int32_t>> step_;
  int32_t budget_ = 0;
  std::vector<SequenceId> pending_release_;  // for the next plan
  std::vector<BlockCopy> pending_copies_;    // for the next plan
  SequenceId next_sequence_id_ = 1;
  int64_t next_admit_order_ = 1;
  uint64_t next_step_id_ = 1;
  int64_t num_preemptions_ = 0;
  StepTimeEstimator step_time_;
  absl::Duration step_time_bound_ = absl::ZeroDuration();  // SetStepTimeBound
  int32_t paced_prompt_tokens_ = 0;  // its cap on prompt tokens, once a step was measured
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_SCHEDULER_H_
