#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>

#include "kernels/philox.h"

namespace kvserve::kernels {

Sampler::Sampler(int32_t vocab)
    : vocab_(vocab),
      processed_(vocab),
      output_count_(vocab, 0),
      seen_(vocab, 0),
      order_(vocab),
      weights_(vocab) {}

void Sampler::ApplyPenalties(const SamplingParams& params, const TokenHistory& history) {
  for (int32_t i = 0; i < history.output_len; ++i) ++output_count_[history.output[i]];
  const float r = params.repetition_penalty;
  // Visit each distinct token of prompt + output once; seen_ marks the visited ones.
  auto penalise = [&](int32_t token) {
    if (seen_[token]) return;
    seen_[token] = 1;
    float& logit = processed_[token];
    if (r != 1.0f) logit = logit > 0.0f ? logit / r : logit * r;
    const int32_t count = output_count_[token];
    if (count > 0) logit -= params.frequency_penalty * count + params.presence_penalty;
  };
  for (int32_t i = 0; i < history.prompt_len; ++i) penalise(history.prompt[i]);
  for (int32_t i = 0; i < history.output_len; ++i) penalise(history.output[i]);
  // Leave the scratch zeroed for the next call, touching only what was set.
  for (int32_t i = 0; i < history.prompt_len; ++i) seen_[history.prompt[i]] = 0;
  for (int32_t i = 0; i < history.output_len; ++i) {
    seen_[history.output[i]] = 0;
    output_count_[history.output[i]] = 0;
  }
}

int32_t Sampler::DrawToken(const SamplingParams& params, uint64_t token_index) {
  const float inv_temperature = 1.0f / params.temperature;
  for (float& logit : processed_) logit *= inv_temperature;
  // Candidates are ordered by decreasing logit, ties by id (a total order, so the result does
  // not depend on the sort implementation), or left in id order when nothing truncates.
  auto before = [this](int32_t a, int32_t b) {
    return processed_[a] > processed_[b] || (processed_[a] == processed_[b] && a < b);
  };
  for (int32_t i = 0; i < vocab_; ++i) order_[i] = i;
  int32_t n = vocab_;
  const bool top_k_sorted = params.top_k > 0 && params.top_k < n;
  if (top_k_sorted) {
    std::nth_element(order_.begin(), order_.begin() + params.top_k, order_.end(), before);
    n = params.top_k;
    std::sort(order_.begin(), order_.begin() + n, before);
  }
  float max_logit = processed_[order_[0]];
  for (int32_t i = 1; i < n; ++i) max_logit = std::max(max_logit, processed_[order_[i]]);
  // weights_[token] = probability relative to the most likely candidate (which has 1).
  double total = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t token = order_[i];
    weights_[token] = std::exp(processed_[token] - max_logit);
    total += weights_[token];
  }
  if (params.top_p < 1.0f) {
    // Keep a token while the mass of the more likely ones is below top_p. Sort only as much
    // of the candidates as that needs, in growing chunks.
    const double target = params.top_p * total;
    double mass = 0.0;
    int32_t kept = 0;
    for (int32_t sorted = 0, chunk = 256;; chunk *= 4) {
      const int32_t end = std::min<int64_t>(n, static_cast<int64_t>(sorted) + chunk);
      if (!top_k_sorted) {  // after top-k all n candidates are sorted already
        if (end < n) {
          std::nth_element(order_.begin() + sorted, order_.begin() + end, order_.begin() + n,
                           before);
        }
        std::sort(order_.begin() + sorted, order_.begin() + end, before);
      }
      while (kept < end && mass < target) mass += weights_[order_[kept++]];
      if (mass >= target || end == n) break;
      sorted = end;
    }
    n = std::max(kept, 1);
  }
  if (params.min_p > 0.0f) {
    // Drop tokens below min_p times the largest probability, keeping the order of the rest
    // (in place: std::stable_partition would allocate). The largest (weight 1) always stays.
    int32_t kept = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (weights_[order_[i]] >= params.min_p) order_[kept++] = order_[i];
    }
    n = kept;
  }
  total = 0.0;
  for (int32_t i = 0; i < n; ++i) total += weights_[order_[i]];

  const double target = UniformFromCounter(params.seed, token_index) * total;
  double cumulative = 0.0;
  for (int32_t i = 0; i < n; ++i) {
    cumulative += weights_[order_[i]];
    if (target < cumulative) return order_[i];
  }
  return order_[n - 1];  // rounding left target at the very top
}

void Sampler::FillLogprobs(const float* logits, int num_logprobs, SampleResult* result) {
  float max_logit = logits[0];
  for (int32_t v = 1; v < vocab_; ++v) max_logit = std::max(max_logit, logits[v]);
  double sum = 0.0;
  for (int32_t v = 0; v < vocab_; ++v) sum += std::exp(logits[v] - max_logit);
  const float log_normalizer = max_logit + static_cast<float>(std::log(sum));
  result->logprob = logits[result->token] - log_normalizer;

  // The n most likely in one pass, kept sorted in result->top (n <= kMaxLogprobs).
  const int32_t n = std::min<int32_t>(std::min(num_logprobs, kMaxLogprobs), vocab_);
  result->num_top = std::max(n, 0);
  int32_t filled = 0;
  for (int32_t v = 0; v < vocab_ && n > 0; ++v) {
    if (filled == n && logits[v] <= result->top[n - 1].logprob) continue;  // ties: lower id wins
    int32_t at = filled < n ? filled++ : n - 1;
    while (at > 0 && result->top[at - 1].logprob < logits[v]) {
      result->top[at] = result->top[at - 1];
      --at;
    }
    result->top[at] = TokenLogprob{v, logits[v]};
  }
  for (int32_t i = 0; i < n; ++i) result->top[i].logprob -= log_normalizer;
}

SampleResult Sampler::Score(const float* logits, int32_t token, int num_logprobs) {
  SampleResult result;
  result.token = token;
  FillLogprobs(logits, num_logprobs, &result);
  return result;
}

SampleResult Sampler::Sample(const float* logits, const SamplingParams& params,
                             const TokenHistory& history, uint64_t token_index) {
  std::copy(logits, logits + vocab_, processed_.begin());
  if (!params.penalties_neutral()) ApplyPenalties(params, history);
  SampleResult result;
  if (params.temperature < kGreedyTemperature) {
    result.token = static_cast<int32_t>(std::max_element(processed_.begin(), processed_.end()) -
                                        processed_.begin());
  } else {
    result.token = DrawToken(params, token_index);
  }
  if (params.want_logprobs) FillLogprobs(logits, params.num_logprobs, &result);
  return result;
}

}  // namespace kvserve::kernels
