// RunnerSequences: the per-sequence state a model runner keeps between steps, rebuilt from the
// StepPlan's full data and deltas (step_plan.h), with the checks that keep a runner honest:
// a sequence is known before it gets deltas, its block table covers every position it computes,
// and it samples only when all its known tokens are computed. Both runners use it.
//
// Thread-safety: one thread (the engine thread).
#ifndef KVSERVE_RUNNER_RUNNER_SEQUENCES_H_
#define KVSERVE_RUNNER_RUNNER_SEQUENCES_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/step_plan.h"
#include "grammar/matcher.h"
#include "kernels/sampling.h"

namespace kvserve {

struct RunnerSequence {
  std::vector<TokenId> tokens;  // every known token
  std::vector<BlockId> block_table;
  int32_t num_computed_tokens = 0;
  SequenceSampling sampling;
  // With sampling.constraint: where the output is in it, made at the first sample and fed every
  // output token since (those known when it is made are replayed, after a migration or a
  // preemption that rebuilt the sequence).
  std::unique_ptr<Matcher> matcher;

  // Penalty history: the prompt and the output so far.
  kernels::TokenHistory History() const;
  // The RNG counter of the next token: the number of output tokens so far.
  uint64_t NextTokenIndex() const {
    return tokens.size() - static_cast<size_t>(sampling.num_prompt_tokens);
  }
};

// One planned sequence after its deltas were applied: compute tokens [first, first + count).
struct RunnerWork {
  RunnerSequence* sequence = nullptr;
  const ScheduledSequence* entry = nullptr;
  int32_t first_position = 0;
  int32_t num_tokens = 0;
};

class RunnerSequences {
 public:
  explicit RunnerSequences(int32_t block_size) : block_size_(block_size) {}

  // Forgets plan.released, applies every entry's data or deltas and checks it (INTERNAL naming
  // the sequence on a mismatch). The returned work is in plan order.
  absl::StatusOr<std::vector<RunnerWork>> Apply(const StepPlan& plan);

  // Marks the work computed (after the forward pass).
  void Commit(const std::vector<RunnerWork>& work);

  int32_t size() const { return static_cast<int32_t>(sequences_.size()); }

 private:
  int32_t block_size_;
  absl::node_hash_map<SequenceId, RunnerSequence> sequences_;  // stable addresses
};

// Prompt logprobs (SequenceSampling::prompt_logprobs >= 0): the positions p of the work's step
// with p + 1 < num_prompt_tokens give prompt token p + 1 its logprob. How many of them (0 when
// the sequence scores nothing this step); they are the work's first positions.
int32_t NumPromptScores(const RunnerWork& work);

// Appends to *out (id and first_token set by the caller's first call) the scores of prompt
// tokens first_position + offset + 1 .. + count, from the logits of the work's positions
// first_position + offset .. + count - 1 (`logits`: [count, vocab]).
void ScorePromptTokens(const RunnerWork& work, int32_t offset, const float* logits, int32_t count,
                       int32_t vocab, kernels::Sampler& sampler, PromptScores* out);

// 1-based rank of `token` in `logits` (larger first, ties by lower id), as output.proto defines.
int32_t TokenRank(const float* logits /* [vocab] */, int32_t vocab, int32_t token);

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_RUNNER_SEQUENCES_H_
