// Sampler: picks the next token of one sequence from the logits of its last position, on the
// CPU, the way vLLM defines the parameters.
//
// Pipeline, in this order:
//  1. Penalties on the raw logits. Repetition (r != 1): each token seen in prompt + output has
//     its logit divided by r when positive, multiplied by r when not. Frequency and presence:
//     each token with c > 0 occurrences in the output loses frequency_penalty * c +
//     presence_penalty.
//  2. temperature == 0 (or below kGreedyTemperature): greedy, the argmax of the penalised
//     logits, ties to the lowest id. Otherwise logits are divided by temperature and
//  3. top-k keeps the k largest (top_k <= 0 or >= vocab: all), then top-p keeps the smallest set
//     of the most likely survivors whose probability (renormalised over the top-k) reaches
//     top_p (the most likely always stays), then min-p drops tokens whose probability is below
//     min_p times the largest.
//  4. One token is drawn from the survivors' renormalised distribution by inverting its CDF
//     (survivors ordered by decreasing logit, ties by id, after top-k or top-p; in id order
//     otherwise) at u = UniformFromCounter(seed,
//     token_index) (kernels/philox.h): the same (logits, params, seed, index) always give the
//     same token, whatever the batching or the call order.
// Logprobs are those of the RAW logits (log-softmax before penalties, temperature and
// truncation), as vLLM returns by default: the chosen token's, and the num_logprobs most likely.
//
// Thread-safety: a Sampler owns scratch sized to the vocabulary; one thread at a time (give each
// sampling thread its own). Sample() allocates nothing.
#ifndef KVSERVE_KERNELS_SAMPLING_H_
#define KVSERVE_KERNELS_SAMPLING_H_

#include <array>
#include <cstdint>
#include <vector>

namespace kvserve::kernels {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // <= 0: no top-k
  float top_p = 1.0f;               // (0, 1]; 1: no top-p
  float min_p = 0.0f;               // [0, 1]; 0: no min-p
  float repetition_penalty = 1.0f;  // > 0; 1: none
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  int32_t num_logprobs = 0;  // top-n logprobs to return, 0..kMaxLogprobs
  // false: no logprobs at all (SampleResult.logprob 0, num_top 0), so no log-softmax pass over
  // the vocabulary is made for a request that did not ask for them.
  bool want_logprobs = true;

  // True when no penalty changes any logit (the penalty pass is skipped).
  bool penalties_neutral() const {
    return repetition_penalty == 1.0f && presence_penalty == 0.0f && frequency_penalty == 0.0f;
  }
};

// The tokens of the sequence so far, for the penalties. Either pointer may be null when its
// length is 0.
struct TokenHistory {
  const int32_t* prompt = nullptr;  // [prompt_len]
  int32_t prompt_len = 0;
  const int32_t* output = nullptr;  // [output_len]
  int32_t output_len = 0;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

inline constexpr int kMaxLogprobs = 20;
inline constexpr float kGreedyTemperature = 1e-5f;

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;                          // of token, under the raw logits
  int32_t num_top = 0;                           // = min(num_logprobs, vocab)
  std::array<TokenLogprob, kMaxLogprobs> top{};  // [num_top], decreasing logprob, ties by id
};

class Sampler {
 public:
  explicit Sampler(int32_t vocab);

  int32_t vocab() const { return vocab_; }

  // REQUIRES: logits has vocab() finite entries; token ids in history are in [0, vocab());
  // params within the ranges above.
  SampleResult Sample(const float* logits /* [vocab] */, const SamplingParams& params,
                      const TokenHistory& history, uint64_t token_index);

  // The logprob of a given `token` under the raw logits and the num_logprobs most likely, as
  // Sample() reports them for the token it picks (no penalties, no draw): scoring a known token,
  // e.g. a prompt token. REQUIRES: logits as for Sample(), token in [0, vocab()).
  SampleResult Score(const float* logits /* [vocab] */, int32_t token, int num_logprobs);

  // The logits after step 1 (and temperature when not greedy) of the last Sample() call, for
  // tests and debugging.
  const std::vector<float>& processed_logits() const { return processed_; }

 private:
  void ApplyPenalties(const SamplingParams& params, const TokenHistory& history);
  int32_t DrawToken(const SamplingParams& params, uint64_t token_index);
  void FillLogprobs(const float* logits, int num_logprobs, SampleResult* result);

  int32_t vocab_;
  std::vector<float> processed_;       // [vocab]
  std::vector<int32_t> output_count_;  // [vocab], all 0 between calls
  std::vector<uint8_t> seen_;          // [vocab], all 0 between calls
  std::vector<int32_t> order_;         // [vocab], candidate ids
  std::vector<float> weights_;         // [vocab], by token: probability / the largest one
};

}  // namespace kvserve::kernels

#endif  // KVSERVE_KERNELS_SAMPLING_H_
