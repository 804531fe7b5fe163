// StepTimeEstimator: what an engine step costs, learnt from the steps the engine ran, so the
// scheduler can fill a step with prompt tokens up to a target time instead of a fixed count
// (EngineOptions::step_time_target_ms; Sarathi-Serve's budget from an inter-token target, with the
// profile taken online instead of ahead).
//
// Two parts, each fitted where it is measured:
//   decode step:  t(D) = fixed + per_decode * D, a least-squares line through the decode-only
//                 steps (D decodes, no prompt tokens), weighted towards recent steps;
//   prompt token: the marginal time of a prompt token in a step that also decodes,
//                 (t - t(D)) / P, averaged over such steps with P >= kMinPromptTokens.
// Until both parts have data the estimator gives no cap: the first steps that mix prompts and
// decodes run uncapped and teach it.
//
// Thread-safety: engine thread only.
#ifndef KVSERVE_ENGINE_STEP_TIME_ESTIMATOR_H_
#define KVSERVE_ENGINE_STEP_TIME_ESTIMATOR_H_

#include <cstdint>
#include <optional>

namespace kvserve {

class StepTimeEstimator {
 public:
  // Steps with fewer prompt tokens say too little about a token's cost.
  static constexpr int32_t kMinPromptTokens = 8;

  // A step that computed `decode_tokens` single-token decodes and `prompt_tokens` prompt tokens
  // (prefill chunks) in `duration_ms`.
  void Observe(int32_t decode_tokens, int32_t prompt_tokens, double duration_ms);

  // The estimated time of a step of `decode_tokens` decodes and no prompt; nullopt before any
  // decode-only step was seen.
  std::optional<double> DecodeStepMs(int32_t decode_tokens) const;
  // The estimated time one more prompt token adds; nullopt before it was measured.
  std::optional<double> PromptTokenMs() const;

  // Prompt tokens a step of `decode_tokens` decodes may add and still end within target_ms:
  // nullopt while the estimate lacks a part; at least `min_tokens` (progress for prompts even
  // when the decodes alone take longer than the target).
  std::optional<int32_t> PromptTokensWithin(double target_ms, int32_t decode_tokens,
                                            int32_t min_tokens) const;

 private:
  // Weighted sums of the decode-only steps: sum w, sum w*D, sum w*D^2, sum w*t, sum w*D*t.
  double w_ = 0, wd_ = 0, wdd_ = 0, wt_ = 0, wdt_ = 0;
  std::optional<double> prompt_token_ms_;
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_STEP_TIME_ESTIMATOR_H_
