#include "engine/request.h"

#include <cmath>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

uint64_t ChoiceSeed(uint64_t seed, int32_t choice_index) {
  if (choice_index == 0) return seed;
  // splitmix64 of (seed, index): a bijection per index, so choices draw unrelated streams.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(choice_index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what, double value) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what, ", got ", value));
}

}  // namespace

absl::Status ValidateRequestFields(const EngineRequest& request) {
  const SamplingOptions& s = request.sampling;
  if (request.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError("prompt_token_ids: must not be empty");
  }
  if (!std::isfinite(s.temperature) || s.temperature < 0) {
    return Invalid("sampling.temperature", "must be finite and >= 0", s.temperature);
  }
  if (s.top_k < 0) return Invalid("sampling.top_k", "must be >= 0", s.top_k);
  if (!(s.top_p > 0 && s.top_p <= 1))
    return Invalid("sampling.top_p", "must be in (0, 1]", s.top_p);
  if (!(s.min_p >= 0 && s.min_p <= 1))
    return Invalid("sampling.min_p", "must be in [0, 1]", s.min_p);
  if (!std::isfinite(s.repetition_penalty) || s.repetition_penalty <= 0) {
    return Invalid("sampling.repetition_penalty", "must be > 0 and finite", s.repetition_penalty);
  }
  if (!(s.presence_penalty >= -2 && s.presence_penalty <= 2)) {
    return Invalid("sampling.presence_penalty", "must be in [-2, 2]", s.presence_penalty);
  }
  if (!(s.frequency_penalty >= -2 && s.frequency_penalty <= 2)) {
    return Invalid("sampling.frequency_penalty", "must be in [-2, 2]", s.frequency_penalty);
  }
  if (s.max_tokens < 0) return Invalid("sampling.max_tokens", "must be >= 0", s.max_tokens);
  for (size_t i = 0; i < s.stop.size(); ++i) {
    if (s.stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sampling.stop[", i, "]: must not be empty"));
    }
  }
  if (s.logprobs.has_value() && *s.logprobs < 0) {
    return Invalid("sampling.logprobs", "must be >= 0", *s.logprobs);
  }
  if (s.prompt_logprobs.has_value() && *s.prompt_logprobs < 0) {
    return Invalid("sampling.prompt_logprobs", "must be >= 0", *s.prompt_logprobs);
  }
  if (request.n < 1) return Invalid("n", "must be >= 1", request.n);
  if (request.progress_interval < absl::ZeroDuration()) {
    return Invalid("progress_interval_ms", "must be >= 0",
                   absl::ToDoubleMilliseconds(request.progress_interval));
  }
  if (request.priority < -100 || request.priority > 100) {
    return Invalid("priority", "must be in [-100, 100]", request.priority);
  }
  absl::flat_hash_set<int32_t> seen;
  for (size_t i = 0; i < request.choices.size(); ++i) {
    const ChoiceStart& choice = request.choices[i];
    if (choice.index < 0 || choice.index >= request.n) {
      return absl::InvalidArgumentError(absl::StrCat("choices[", i, "].index: must be in [0, ",
                                                     request.n, "), got ", choice.index));
    }
    if (!seen.insert(choice.index).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("choices[", i, "].index: duplicate index ", choice.index));
    }
    if (choice.emitted_text_bytes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("choices[", i, "].emitted_text_bytes: must be >= 0"));
    }
    if (s.max_tokens > 0 &&
        static_cast<int64_t>(choice.generated_token_ids.size()) >= s.max_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("choices[", i, "].generated_token_ids: already holds max_tokens (",
                       s.max_tokens, ") tokens"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve
