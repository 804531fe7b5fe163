// StepPlan and StepResult: what the scheduler asks the model runner to do in one engine step,
// and what comes back. Data flows one way: the scheduler builds the plan, the runner executes it
// and returns sampled tokens, the scheduler applies them; the runner never calls back.
//
// The plan is a plain record that can be serialised and broadcast to tensor-parallel ranks:
// a sequence the runner has not seen (or must forget and relearn, after preemption) comes with
// its full data (every known token, its whole block table, its sampling settings); a sequence
// the runner already knows comes with deltas only (tokens appended since the previous plan, the
// block ids appended to its table). The runner keeps per-sequence state between steps and drops
// it for the ids in `released`.
//
// Order of work in Execute: forget `released`, run `host_copies` in order (blocks between the
// device pool and the host tier), copy `block_copies` (every layer, K and V), then one forward over
// `sequences` in order (each computes its num_scheduled_tokens tokens after its computed ones),
// then sample the sequences with `sample` set, in order. A runner may overlap loads from the host
// with what follows them (runner/host_copies.h) as long as the result is that of this order.
//
// Thread-safety: plain values.
#ifndef KVSERVE_ENGINE_STEP_PLAN_H_
#define KVSERVE_ENGINE_STEP_PLAN_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/sampling.h"
#include "kvcache/kv_cache_manager.h"
#include "kvcache/types.h"

namespace kvserve {

class CompiledConstraint;  // grammar/compiled_constraint.h

// How a sequence samples: the kernel parameters (seed already per choice, num_logprobs the top-n
// count) plus where its output starts, so that penalties and the RNG counter (the output index)
// can be derived from its tokens.
struct SequenceSampling {
  kernels::SamplingParams params;
  int32_t num_prompt_tokens = 0;  // tokens[0, num_prompt_tokens) are the prompt
  bool logprobs = false;          // return the chosen token's logprob and rank (+ top-n)
  // Score the prompt tokens this sequence computes (StepResult::prompt_logprobs) with this many
  // alternatives each; -1: no. The leader's runner alone scores (followers get -1).
  int32_t prompt_logprobs = -1;
  // Structured output (SamplingOptions::constraint); null: free text. In-process only: a
  // tensor-parallel follower never samples, so step messages leave it out.
  std::shared_ptr<const CompiledConstraint> constraint;
};

struct ScheduledSequence {
  SequenceId id = 0;
  bool is_new = false;  // full data below; otherwise deltas
  // is_new: every known token; else: tokens appended since the previous plan (sampled ones).
  std::vector<TokenId> token_ids;
  // is_new: the whole block table; else: block ids appended since the previous plan.
  std::vector<BlockId> block_ids;
  int32_t num_computed_tokens = 0;   // is_new only: tokens whose K/V are already in the cache
  SequenceSampling sampling;         // is_new only
  int32_t num_scheduled_tokens = 0;  // tokens computed this step (after the computed ones)
  // Sample the next token from the logits of the last scheduled token (it is the last known
  // token of the sequence).
  bool sample = false;
};

// A single-token step of a sequence the runner knows, sampled: a decode (the rest are prefill
// chunks). The one classification of step metrics and simulated step times.
inline bool IsDecode(const ScheduledSequence& seq) {
  return !seq.is_new && seq.num_scheduled_tokens == 1 && seq.sample;
}

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<SequenceId> released;     // the runner forgets these first
  std::vector<HostCopy> host_copies;    // then runs these, in order
  std::vector<BlockCopy> block_copies;  // then copies these blocks
  std::vector<ScheduledSequence> sequences;

  int32_t num_scheduled_tokens() const {
    int32_t total = 0;
    for (const ScheduledSequence& seq : sequences) total += seq.num_scheduled_tokens;
    return total;
  }
  bool empty() const {
    return sequences.empty() && released.empty() && host_copies.empty() && block_copies.empty();
  }
};

// OK when every host copy names a device block in [1, num_blocks) and a host block in
// [0, num_host_blocks); INTERNAL otherwise (a runner checks before copying: a tensor-parallel
// follower gets plans off the wire).
inline absl::Status CheckHostCopies(const StepPlan& plan, int32_t num_blocks,
                                    int32_t num_host_blocks) {
  for (const HostCopy& copy : plan.host_copies) {
    if (copy.device <= kNullBlock || copy.device >= num_blocks || copy.host < 0 ||
        copy.host >= num_host_blocks) {
      return absl::InternalError(absl::StrCat("step ", plan.step_id, ": host copy of device block ",
                                              copy.device, " and host block ", copy.host,
                                              " is out of range (", num_blocks, " device, ",
                                              num_host_blocks, " host blocks)"));
    }
  }
  return absl::OkStatus();
}

struct SampledToken {
  SequenceId id = 0;
  TokenId token = 0;
  float logprob = 0.0f;  // under the raw logits (kernels/sampling.h)
  int32_t rank = 0;      // 1-based rank of token in the raw distribution; 0 unless logprobs
  std::vector<kernels::TokenLogprob> top;  // the top-n, when logprobs
};

// The logprobs of prompt tokens first_token, first_token + 1, ... of one sequence, each under
// the logits of the position before it (so first_token >= 1), as a prefill chunk computed them.
// `scores[i].token` is prompt token first_token + i; logprob, rank and top as for a sample.
struct PromptScores {
  SequenceId id = 0;
  int32_t first_token = 1;
  std::vector<SampledToken> scores;
};

struct StepResult {
  std::vector<SampledToken> sampled;  // one per plan sequence with sample set, in plan order
  // One per plan sequence with sampling.prompt_logprobs >= 0 whose step computed a position
  // before the prompt's last token, in plan order.
  std::vector<PromptScores> prompt_logprobs;
  // The step's forward (or its copies) had to wait for a host-tier load issued in the same step
  // (runner/host_copies.h): a load that did not overlap compute.
  bool waited_for_host_loads = false;
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_STEP_PLAN_H_
