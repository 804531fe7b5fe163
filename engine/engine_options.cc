#include "engine/engine_options.h"

#include "absl/strings/str_cat.h"
#include "kernels/sampling.h"

namespace kvserve {

absl::Status EngineOptions::Validate() const {
  auto bad = [](absl::string_view option, absl::string_view what, int64_t value) {
    return absl::InvalidArgumentError(absl::StrCat(option, ": ", what, ", got ", value));
  };
  if (block_size != 8 && block_size != 16 && block_size != 32) {
    return bad("block_size", "must be 8, 16 or 32", block_size);
  }
  if (num_kv_blocks < 0) return bad("num_kv_blocks", "must be >= 0", num_kv_blocks);
  if (kv_memory_bytes < 0) return bad("kv_memory_bytes", "must be >= 0", kv_memory_bytes);
  if (host_kv_bytes < 0) return bad("host_kv_bytes", "must be >= 0", host_kv_bytes);
  if (max_num_seqs < 1) return bad("max_num_seqs", "must be >= 1", max_num_seqs);
  if (max_num_batched_tokens < max_num_seqs) {
    return bad("max_num_batched_tokens",
               absl::StrCat("must be >= max_num_seqs (", max_num_seqs, ")"),
               max_num_batched_tokens);
  }
  if (max_prefill_tokens_per_step < 0) {
    return bad("max_prefill_tokens_per_step", "must be >= 0 (0: no cap)",
               max_prefill_tokens_per_step);
  }
  if (!(step_time_target_ms >= 0) && step_time_target_ms != kAutoStepTimeTarget) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step_time_target_ms: must be >= 0 (0: off) or -1 (automatic), got ", step_time_target_ms));
  }
  if (max_queue_wait_ms < 0) {
    return bad("max_queue_wait_ms", "must be >= 0 (0: off)", max_queue_wait_ms);
  }
  if (preemption_mode == PreemptionMode::kSwap && host_kv_bytes == 0) {
    return absl::InvalidArgumentError(
        "preemption_mode: swap keeps blocks in the host tier, and host_kv_bytes is 0");
  }
  if (max_waiting_requests < 1) {
    return bad("max_waiting_requests", "must be >= 1", max_waiting_requests);
  }
  if (max_n < 1) return bad("max_n", "must be >= 1", max_n);
  if (max_logprobs < 0 || max_logprobs > kernels::kMaxLogprobs) {
    return bad("max_logprobs", absl::StrCat("must be in [0, ", kernels::kMaxLogprobs, "]"),
               max_logprobs);
  }
  if (max_stop_strings < 0) return bad("max_stop_strings", "must be >= 0", max_stop_strings);
  if (max_context_len < 0) return bad("max_context_len", "must be >= 0", max_context_len);
  return absl::OkStatus();
}

}  // namespace kvserve
