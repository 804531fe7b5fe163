// EngineOptions: the engine's limits, a plain struct validated once (Validate) at start-up with
// messages that name the option (the kvserve-worker flag of the same name, dashes for
// underscores).
#ifndef KVSERVE_ENGINE_ENGINE_OPTIONS_H_
#define KVSERVE_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>

#include "absl/status/status.h"

namespace kvserve {

// What a preempted sequence keeps (Scheduler): kRecompute frees its blocks (its full blocks stay
// cached, so it usually recomputes only its partial last block); kSwap also keeps that partial
// block in the host tier and restores it, so nothing is recomputed while its blocks survive.
enum class PreemptionMode { kRecompute, kSwap };

// step_time_target_ms's value for the automatic target (1.5x the step's decodes alone, at
// least 50 ms: SchedulerConfig).
inline constexpr double kAutoStepTimeTarget = -1;

struct EngineOptions {
  int32_t block_size = 16;  // tokens per KV block: 8, 16 or 32
  // Size of the KV pool: num_kv_blocks usable blocks (the null block comes on top) when > 0,
  // else as many blocks as fit in kv_memory_bytes (ModelRunner::KvBytesPerBlock), else (both 0)
  // as many as fit in what ModelRunner::ProfileKvBytes says the device has left.
  int32_t num_kv_blocks = 0;
  int64_t kv_memory_bytes = 0;
  // Host memory for the host KV tier (kvcache/host_block_pool.h), in bytes of the runner's
  // blocks (ModelRunner::KvBytesPerBlock: per rank under tensor parallelism); 0: no host tier.
  int64_t host_kv_bytes = 0;
  int32_t max_num_seqs = 64;              // sequences (choices) running at once
  int32_t max_num_batched_tokens = 2048;  // tokens computed per step; >= max_num_seqs
  // Prefill tokens of a step that also decodes (SchedulerConfig); 0: up to the step's budget.
  int32_t max_prefill_tokens_per_step = 0;
  // Or: prompt tokens such that a step that also decodes should last this long, by the
  // StepTimeEstimator's measure of the steps run (SchedulerConfig); kAutoStepTimeTarget (the
  // default): 1.5x the step's decodes alone, at least 50 ms; 0: off.
  double step_time_target_ms = kAutoStepTimeTarget;
  // A step in which a request has waited in the queue this long takes prompt tokens up to
  // max_num_batched_tokens, whatever the caps say (SchedulerConfig::max_queue_wait); 0: never.
  int32_t max_queue_wait_ms = 1000;
  // kSwap needs a host tier (host_kv_bytes > 0).
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  // A sequence with blocks to load from the host tier sits out the step that loads them, so the
  // loads overlap the others' forward (SchedulerConfig::defer_host_loads).
  bool defer_host_loads = true;
  int32_t max_waiting_requests = 256;  // Submit past this: RESOURCE_EXHAUSTED
  int32_t max_n = 16;         // choices per request; the engine uses min(max_n, max_num_seqs)
  int32_t max_logprobs = 20;  // SamplingOptions.logprobs upper bound (<= 20)
  int32_t max_stop_strings = 16;
  // Prompt + output tokens of one sequence; 0: the model's context window. Never above it.
  int32_t max_context_len = 0;
  uint64_t kv_epoch = 0;  // KV event epoch; 0: random

  // INVALID_ARGUMENT "<option>: ..." for the first bad option.
  absl::Status Validate() const;
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_ENGINE_OPTIONS_H_
