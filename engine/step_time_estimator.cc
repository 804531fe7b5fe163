#include "engine/step_time_estimator.h"

#include <algorithm>
#include <cmath>

namespace kvserve {
namespace {

// Each new step's weight against the history: about the last 50 steps count.
constexpr double kDecay = 0.98;
constexpr double kPromptTokenWeight = 0.1;  // the prompt-token average's step

}  // namespace

void StepTimeEstimator::Observe(int32_t decode_tokens, int32_t prompt_tokens, double duration_ms) {
  if (!(duration_ms >= 0) || decode_tokens < 0 || prompt_tokens < 0) return;
  const double d = decode_tokens;
  if (prompt_tokens == 0) {
    if (decode_tokens == 0) return;
    w_ = w_ * kDecay + 1;
    wd_ = wd_ * kDecay + d;
    wdd_ = wdd_ * kDecay + d * d;
    wt_ = wt_ * kDecay + duration_ms;
    wdt_ = wdt_ * kDecay + d * duration_ms;
    return;
  }
  if (decode_tokens == 0 || prompt_tokens < kMinPromptTokens) return;
  const std::optional<double> decode_ms = DecodeStepMs(decode_tokens);
  if (!decode_ms.has_value()) return;
  const double per_token = std::max(0.0, duration_ms - *decode_ms) / prompt_tokens;
  prompt_token_ms_ = prompt_token_ms_.has_value()
                         ? *prompt_token_ms_ + kPromptTokenWeight * (per_token - *prompt_token_ms_)
                         : per_token;
}

std::optional<double> StepTimeEstimator::DecodeStepMs(int32_t decode_tokens) const {
  if (w_ <= 0) return std::nullopt;
  const double mean_d = wd_ / w_;
  const double mean_t = wt_ / w_;
  const double var_d = wdd_ / w_ - mean_d * mean_d;
  // One batch size seen so far (or nearly): the line is flat at the mean.
  double slope = var_d > 1e-6 ? (wdt_ / w_ - mean_d * mean_t) / var_d : 0.0;
  slope = std::max(0.0, slope);  // a step never gets cheaper with more decodes
  return std::max(0.0, mean_t + slope * (decode_tokens - mean_d));
}

std::optional<double> StepTimeEstimator::PromptTokenMs() const { return prompt_token_ms_; }

std::optional<int32_t> StepTimeEstimator::PromptTokensWithin(double target_ms,
                                                             int32_t decode_tokens,
                                                             int32_t min_tokens) const {
  const std::optional<double> decode_ms = DecodeStepMs(decode_tokens);
  if (!decode_ms.has_value() || !prompt_token_ms_.has_value()) return std::nullopt;
  if (*prompt_token_ms_ <= 0) return std::nullopt;  // free so far: nothing to bound
  const double room = (target_ms - *decode_ms) / *prompt_token_ms_;
  if (!(room >= min_tokens)) return min_tokens;
  return static_cast<int32_t>(std::min<double>(std::floor(room), INT32_MAX));
}

}  // namespace kvserve
