#include "engine/choice_state.h"

#include <algorithm>
#include <utility>

namespace kvserve {

namespace {

TokenLogprobOutput MakeLogprob(const Tokenizer* tokenizer, int32_t token, float logprob,
                               int32_t rank) {
  TokenLogprobOutput out;
  out.token_id = token;
  out.logprob = logprob;
  out.rank = rank;
  if (tokenizer != nullptr) tokenizer->AppendTokenBytes(token, false, &out.token_bytes);
  return out;
}

}  // namespace

PositionLogprobsOutput MakePositionLogprobs(const SampledToken& scored,
                                            const Tokenizer* tokenizer) {
  PositionLogprobsOutput position;
  position.chosen = MakeLogprob(tokenizer, scored.token, scored.logprob, scored.rank);
  for (size_t i = 0; i < scored.top.size(); ++i) {
    position.top.push_back(MakeLogprob(tokenizer, scored.top[i].token, scored.top[i].logprob,
                                       static_cast<int32_t>(i) + 1));
  }
  return position;
}

ChoiceState::ChoiceState(const ChoiceStart& start, const SamplingOptions* sampling,
                         const StopRules* rules, int32_t num_prompt_tokens,
                         const Tokenizer* tokenizer)
    : index_(start.index),
      sampling_(sampling),
      rules_(rules),
      num_prompt_tokens_(num_prompt_tokens),
      tokenizer_(tokenizer),
      stop_checker_(sampling->stop, sampling->include_stop_str_in_output),
      generated_(start.generated_token_ids),
      skip_text_bytes_(start.emitted_text_bytes) {
  if (tokenizer_ != nullptr) {
    detokenizer_ = std::make_unique<IncrementalDetokenizer>(*tokenizer_,
                                                            !sampling_->detokenize_special_tokens);
    // Rebuild the text state of tokens generated before a migration; the client has the first
    // emitted_text_bytes of that text already, so Release skips them.
    for (int32_t token : generated_) Release(stop_checker_.Push(detokenizer_->Push(token)).text);
  }
  // Replayed text beyond emitted_text_bytes (if any) stays pending and goes out next.
}

ChoiceOutput& ChoiceState::Pending() {
  if (!pending_.has_value()) {
    pending_.emplace();
    pending_->index = index_;
  }
  return *pending_;
}

void ChoiceState::Release(std::string text) {
  if (skip_text_bytes_ > 0) {
    const size_t skip = std::min<size_t>(text.size(), static_cast<size_t>(skip_text_bytes_));
    text.erase(0, skip);
    skip_text_bytes_ -= static_cast<int64_t>(skip);
  }
  if (!text.empty()) Pending().text += text;
}

void ChoiceState::FlushText() {
  if (detokenizer_ == nullptr) return;
  std::string tail = detokenizer_->Flush();
  StopChecker::Result result = stop_checker_.Push(tail);
  Release(std::move(result.text));
  if (!result.stopped.has_value()) Release(stop_checker_.Flush());
}

bool ChoiceState::OnToken(const SampledToken& sampled, absl::Time now,
                          absl::Duration* inter_token_latency) {
  *inter_token_latency =
      last_token_time_.has_value() ? now - *last_token_time_ : absl::ZeroDuration();
  last_token_time_ = now;
  const int32_t token = sampled.token;
  generated_.push_back(token);
  ++num_new_tokens_;
  ChoiceOutput& out = Pending();
  out.token_ids.push_back(token);
  if (sampling_->logprobs.has_value()) {
    out.logprobs.push_back(MakePositionLogprobs(sampled, tokenizer_));
  }

  if (rules_->stop_token_ids.contains(token)) {
    FlushText();
    if (sampling_->include_stop_str_in_output && tokenizer_ != nullptr) {
      std::string bytes;
      tokenizer_->AppendTokenBytes(token, false, &bytes);
      Release(std::move(bytes));
    }
    finish_reason_ = FinishReason::kStop;
    out.stop_token_id = token;
    out.finish_reason = finish_reason_;
    return true;
  }
  if (detokenizer_ != nullptr) {
    StopChecker::Result result = stop_checker_.Push(detokenizer_->Push(token));
    Release(std::move(result.text));
    if (result.stopped.has_value()) {
      finish_reason_ = FinishReason::kStopString;
      out.stop_string = stop_checker_.stop_strings()[*result.stopped];
      out.finish_reason = finish_reason_;
      return true;
    }
  }
  const int64_t total = num_prompt_tokens_ + static_cast<int64_t>(generated_.size());
  if (static_cast<int32_t>(generated_.size()) >= rules_->max_tokens ||
      total >= rules_->max_context_len) {
    Finish(FinishReason::kLength);
    return true;
  }
  return false;
}

void ChoiceState::Finish(FinishReason reason) {
  if (finished()) return;
  FlushText();
  finish_reason_ = reason;
  Pending().finish_reason = reason;
}

std::optional<ChoiceOutput> ChoiceState::TakeOutput() {
  std::optional<ChoiceOutput> out = std::move(pending_);
  pending_.reset();
  return out;
}

}  // namespace kvserve
