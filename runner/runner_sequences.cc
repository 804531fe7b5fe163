#include "runner/runner_sequences.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve {

kernels::TokenHistory RunnerSequence::History() const {
  kernels::TokenHistory history;
  const int32_t prompt_len = sampling.num_prompt_tokens;
  history.prompt = tokens.data();
  history.prompt_len = prompt_len;
  history.output = tokens.data() + prompt_len;
  history.output_len = static_cast<int32_t>(tokens.size()) - prompt_len;
  return history;
}

absl::StatusOr<std::vector<RunnerWork>> RunnerSequences::Apply(const StepPlan& plan) {
  for (SequenceId id : plan.released) sequences_.erase(id);
  std::vector<RunnerWork> work;
  work.reserve(plan.sequences.size());
  for (const ScheduledSequence& entry : plan.sequences) {
    RunnerSequence* seq = nullptr;
    if (entry.is_new) {
      seq = &sequences_[entry.id];
      seq->tokens = entry.token_ids;
      seq->block_table = entry.block_ids;
      seq->num_computed_tokens = entry.num_computed_tokens;
      seq->sampling = entry.sampling;
      seq->matcher.reset();  // remade from the tokens at the next sample
    } else {
      auto it = sequences_.find(entry.id);
      if (it == sequences_.end()) {
        return absl::InternalError(absl::StrCat("plan: deltas for unknown sequence ", entry.id));
      }
      seq = &it->second;
      seq->tokens.insert(seq->tokens.end(), entry.token_ids.begin(), entry.token_ids.end());
      seq->block_table.insert(seq->block_table.end(), entry.block_ids.begin(),
                              entry.block_ids.end());
    }
    const int64_t end = static_cast<int64_t>(seq->num_computed_tokens) + entry.num_scheduled_tokens;
    if (entry.num_scheduled_tokens <= 0 || end > static_cast<int64_t>(seq->tokens.size())) {
      return absl::InternalError(
          absl::StrCat("plan: sequence ", entry.id, " schedules ", entry.num_scheduled_tokens,
                       " tokens after ", seq->num_computed_tokens, " of ", seq->tokens.size()));
    }
    if (end > static_cast<int64_t>(seq->block_table.size()) * block_size_) {
      return absl::InternalError(
          absl::StrCat("plan: sequence ", entry.id, " has no block for position ", end - 1));
    }
    if (entry.sample && end != static_cast<int64_t>(seq->tokens.size())) {
      return absl::InternalError(
          absl::StrCat("plan: sequence ", entry.id, " samples before its last known token"));
    }
    work.push_back(RunnerWork{.sequence = seq,
                              .entry = &entry,
                              .first_position = seq->num_computed_tokens,
                              .num_tokens = entry.num_scheduled_tokens});
  }
  return work;
}

void RunnerSequences::Commit(const std::vector<RunnerWork>& work) {
  for (const RunnerWork& item : work) item.sequence->num_computed_tokens += item.num_tokens;
}

int32_t NumPromptScores(const RunnerWork& work) {
  const RunnerSequence& seq = *work.sequence;
  if (seq.sampling.prompt_logprobs < 0) return 0;
  const int32_t last_scoring = seq.sampling.num_prompt_tokens - 2;  // scores the last token
  return std::max(0, std::min(work.first_position + work.num_tokens - 1, last_scoring) -
                         work.first_position + 1);
}

void ScorePromptTokens(const RunnerWork& work, int32_t offset, const float* logits, int32_t count,
                       int32_t vocab, kernels::Sampler& sampler, PromptScores* out) {
  const RunnerSequence& seq = *work.sequence;
  for (int32_t i = 0; i < count; ++i) {
    const float* row = logits + static_cast<size_t>(i) * vocab;
    const TokenId token = seq.tokens[work.first_position + offset + i + 1];
    const kernels::SampleResult score = sampler.Score(row, token, seq.sampling.prompt_logprobs);
    SampledToken& scored = out->scores.emplace_back();
    scored.id = work.entry->id;
    scored.token = token;
    scored.logprob = score.logprob;
    scored.rank = TokenRank(row, vocab, token);
    scored.top.assign(score.top.begin(), score.top.begin() + score.num_top);
  }
}

int32_t TokenRank(const float* logits, int32_t vocab, int32_t token) {
  const float value = logits[token];
  int32_t rank = 1;
  for (int32_t i = 0; i < vocab; ++i) {
    if (logits[i] > value || (logits[i] == value && i < token)) ++rank;
  }
  return rank;
}

}  // namespace kvserve
