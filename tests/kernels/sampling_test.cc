// The sampler and its counter-based RNG: greedy, determinism per (seed, index), the sampled
// distribution, top-k / top-p / min-p truncation, penalties, logprobs.
#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/philox.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::RandomFloats;

TEST(PhiloxTest, MatchesPublishedKnownAnswers) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution.
  EXPECT_EQ(Philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, UniformIsInUnitIntervalAndDependsOnSeedAndIndex) {
  double sum = 0.0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const double u = UniformFromCounter(5, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.01);
  EXPECT_NE(UniformFromCounter(5, 0), UniformFromCounter(6, 0));
  EXPECT_NE(UniformFromCounter(5, 0), UniformFromCounter(5, 1));
  EXPECT_NE(UniformFromCounter(5, 0), UniformFromCounter(5, uint64_t{1} << 32));
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature) {
  double max_logit = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < p.size(); ++i)
    sum += p[i] = std::exp((logits[i] - max_logit) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

TEST(SamplerTest, GreedyIsArgmaxWithTiesToLowestId) {
  std::mt19937 rng(1);
  Sampler sampler(1000);
  SamplingParams params;
  params.temperature = 0.0f;
  for (int round = 0; round < 20; ++round) {
    std::vector<float> logits = RandomFloats(1000, rng, -5.0f, 5.0f);
    const int a = static_cast<int>(rng() % 1000), b = static_cast<int>(rng() % 1000);
    logits[a] = logits[b] = 9.0f;
    EXPECT_EQ(sampler.Sample(logits.data(), params, {}, round).token, std::min(a, b));
  }
}

TEST(SamplerTest, SameSeedAndIndexGiveSameTokenWhateverTheCallOrder) {
  std::mt19937 rng(2);
  const std::vector<float> logits = RandomFloats(1000, rng, -2.0f, 2.0f);
  const std::vector<float> other = RandomFloats(1000, rng, -2.0f, 2.0f);
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_p = 0.95f;
  params.seed = 1234;
  SamplingParams other_params = params;
  other_params.seed = 99;
  Sampler in_order(1000), shuffled(1000);
  std::vector<int32_t> forward(200), backward(200);
  for (int i = 0; i < 200; ++i) forward[i] = in_order.Sample(logits.data(), params, {}, i).token;
  for (int i = 199; i >= 0; --i) {
    // Another sequence's call in between (as in a batch) must not disturb this one.
    shuffled.Sample(other.data(), other_params, {}, i);
    backward[i] = shuffled.Sample(logits.data(), params, {}, i).token;
  }
  EXPECT_EQ(forward, backward);
  EXPECT_GT(std::set<int32_t>(forward.begin(), forward.end()).size(), 5u);  // not constant
}

TEST(SamplerTest, FrequenciesFollowTheSoftmaxChiSquare) {
  const std::vector<float> logits = {1.0f, -0.5f, 0.3f, 2.0f, 0.0f, -1.0f, 1.5f, 0.7f};
  const double temperature = 0.8;
  const std::vector<double> p = Softmax(logits, temperature);
  Sampler sampler(8);
  SamplingParams params;
  params.temperature = static_cast<float>(temperature);
  params.seed = 77;
  const int n = 40000;
  std::vector<int> counts(8, 0);
  for (int i = 0; i < n; ++i) ++counts[sampler.Sample(logits.data(), params, {}, i).token];
  double chi2 = 0.0;
  for (int v = 0; v < 8; ++v) chi2 += std::pow(counts[v] - n * p[v], 2) / (n * p[v]);
  // 7 degrees of freedom: P(chi2 > 24.32) = 0.001.
  EXPECT_LT(chi2, 24.32);
}

TEST(SamplerTest, TopKSamplesOnlyTheKLargest) {
  std::mt19937 rng(3);
  const std::vector<float> logits = RandomFloats(1000, rng, -1.0f, 1.0f);
  std::vector<int32_t> ids(1000);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const std::set<int32_t> top(ids.begin(), ids.begin() + 5);
  Sampler sampler(1000);
  SamplingParams params;
  params.top_k = 5;
  params.temperature = 2.0f;
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(sampler.Sample(logits.data(), params, {}, i).token);
  EXPECT_EQ(seen, top);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities 0.4, 0.3, 0.2, 0.1: top_p 0.65 needs {0, 1}; 0.75 needs {0, 1, 2}. A top-k
  // of 0 or >= vocab changes nothing.
  const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                                     std::log(0.1f)};
  Sampler sampler(4);
  for (int top_k : {0, 4, 100}) {
    for (const auto& [top_p, want] : std::vector<std::pair<float, std::set<int32_t>>>{
             {0.65f, {0, 1}}, {0.75f, {0, 1, 2}}, {0.1f, {0}}}) {
      SamplingParams params;
      params.top_p = top_p;
      params.top_k = top_k;
      std::set<int32_t> seen;
      for (int i = 0; i < 400; ++i) seen.insert(sampler.Sample(logits.data(), params, {}, i).token);
      EXPECT_EQ(seen, want) << "top_p " << top_p << " top_k " << top_k;
    }
  }
}

TEST(SamplerTest, TopPAppliesToTheTopKRenormalised) {
  // After top-k 2: 0.4 / 0.7 = 0.57 and 0.3 / 0.7 = 0.43. top_p 0.5 keeps {0}; 0.6 keeps {0, 1}
  // (without top-k, 0.6 would keep {0, 1} too, and 0.45 would keep {0, 1}: not {0}).
  const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                                     std::log(0.1f)};
  Sampler sampler(4);
  for (const auto& [top_p, want] :
       std::vector<std::pair<float, std::set<int32_t>>>{{0.5f, {0}}, {0.6f, {0, 1}}}) {
    SamplingParams params;
    params.top_k = 2;
    params.top_p = top_p;
    std::set<int32_t> seen;
    for (int i = 0; i < 400; ++i) seen.insert(sampler.Sample(logits.data(), params, {}, i).token);
    EXPECT_EQ(seen, want) << "top_p " << top_p;
  }
}

TEST(SamplerTest, TopPOnALargeVocabularyNeedsSeveralSortChunks) {
  // 5000 equally likely tokens and one 10x more likely: top_p 0.5 keeps about half of them,
  // more than the first sorted chunk. Tokens in the kept set are the lowest ids (ties by id).
  std::vector<float> logits(5001, 0.0f);
  logits[4321] = std::log(10.0f);
  const double total = 5000 + 10;
  const int keep_uniform = static_cast<int>(std::ceil((0.5 * total - 10) / 1.0));
  Sampler sampler(5001);
  SamplingParams params;
  params.top_p = 0.5f;
  int32_t max_uniform_seen = -1;
  for (int i = 0; i < 3000; ++i) {
    const int32_t token = sampler.Sample(logits.data(), params, {}, i).token;
    if (token != 4321) max_uniform_seen = std::max(max_uniform_seen, token);
  }
  const int32_t last_kept = keep_uniform < 4321 ? keep_uniform - 1 : keep_uniform;
  EXPECT_LE(max_uniform_seen, last_kept);
  EXPECT_GT(max_uniform_seen, last_kept - 50);  // the whole kept range is used
}

TEST(SamplerTest, MinPDropsTokensBelowTheFractionOfTheMax) {
  // Probabilities proportional to 1, 0.5, 0.2, 0.05: min_p 0.3 keeps {0, 1}.
  const std::vector<float> logits = {0.0f, std::log(0.5f), std::log(0.2f), std::log(0.05f)};
  Sampler sampler(4);
  SamplingParams params;
  params.min_p = 0.3f;
  std::set<int32_t> seen;
  for (int i = 0; i < 400; ++i) seen.insert(sampler.Sample(logits.data(), params, {}, i).token);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(SamplerTest, PenaltiesChangeLogitsAsDefined) {
  const std::vector<float> logits = {2.0f, -2.0f, 1.0f, -1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> prompt = {0, 1, 0};
  const std::vector<int32_t> output = {2, 3, 3, 2, 3};  // 2 twice, 3 three times
  Sampler sampler(6);
  SamplingParams params;
  params.temperature = 0.0f;  // processed logits are then the penalised ones
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.25f;
  params.presence_penalty = 0.5f;
  const TokenHistory history{prompt.data(), 3, output.data(), 5};
  sampler.Sample(logits.data(), params, history, 0);
  const std::vector<float> want = {1.0f,   // prompt, positive: / 2
                                   -4.0f,  // prompt, negative: * 2
                                   1.0f / 2 - 0.25f * 2 - 0.5f,
                                   -1.0f * 2 - 0.25f * 3 - 0.5f,
                                   0.5f,  // never seen
                                   3.0f};
  EXPECT_EQ(sampler.processed_logits(), want);
  // The scratch is clean afterwards: the same call without history leaves logits alone.
  sampler.Sample(logits.data(), params, {}, 0);
  EXPECT_EQ(sampler.processed_logits(), logits);
  // Penalties decide greedy: token 5 (3.0) beats 0 (2 -> 1.0) once 0 is penalised... and
  // with 5 in the output, presence 4 drops it below token 0.
  const std::vector<int32_t> five = {5};
  params.repetition_penalty = 1.0f;
  params.frequency_penalty = 0.0f;
  params.presence_penalty = 4.0f;
  EXPECT_EQ(sampler.Sample(logits.data(), params, {nullptr, 0, five.data(), 1}, 0).token, 0);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmaxSortedAndNormalised) {
  std::mt19937 rng(4);
  const std::vector<float> logits = RandomFloats(10, rng, -3.0f, 3.0f);
  const std::vector<double> p = Softmax(logits, 1.0);
  Sampler sampler(10);
  SamplingParams params;
  params.temperature = 0.5f;  // does not change the returned logprobs
  params.repetition_penalty = 1.3f;
  params.num_logprobs = 10;
  const std::vector<int32_t> output = {1, 2};
  const SampleResult r = sampler.Sample(logits.data(), params, {nullptr, 0, output.data(), 2}, 3);
  ASSERT_EQ(r.num_top, 10);
  double total = 0.0;
  for (int i = 0; i < r.num_top; ++i) {
    total += std::exp(r.top[i].logprob);
    EXPECT_NEAR(r.top[i].logprob, std::log(p[r.top[i].token]), 1e-5);
    if (i > 0) {
      EXPECT_GE(r.top[i - 1].logprob, r.top[i].logprob);
    }
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_NEAR(r.logprob, std::log(p[r.token]), 1e-5);
  params.num_logprobs = 3;
  const SampleResult r3 = sampler.Sample(logits.data(), params, {}, 3);
  ASSERT_EQ(r3.num_top, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r3.top[i].token, r.top[i].token);
}

TEST(SamplerTest, WithoutLogprobsTheSameTokenIsDrawnAndNoLogprobIsComputed) {
  std::mt19937 rng(5);
  const std::vector<float> logits = RandomFloats(50, rng, -3.0f, 3.0f);
  const std::vector<int32_t> output = {4, 7, 4};
  for (const float temperature : {0.0f, 0.8f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.frequency_penalty = 0.5f;
    params.num_logprobs = 5;
    Sampler sampler(50);
    const SampleResult with =
        sampler.Sample(logits.data(), params, {nullptr, 0, output.data(), 3}, 9);
    params.want_logprobs = false;
    const SampleResult without =
        sampler.Sample(logits.data(), params, {nullptr, 0, output.data(), 3}, 9);
    EXPECT_EQ(without.token, with.token);
    EXPECT_EQ(without.num_top, 0);
    EXPECT_EQ(without.logprob, 0.0f);
    EXPECT_EQ(with.num_top, 5);
  }
}

TEST(SamplerTest, NeutralPenaltiesLeaveTheLogitsAsTheyAre) {
  std::mt19937 rng(6);
  const std::vector<float> logits = RandomFloats(20, rng, -3.0f, 3.0f);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> output = {3, 3, 5};
  SamplingParams params;
  params.temperature = 0.0f;
  ASSERT_TRUE(params.penalties_neutral());
  Sampler sampler(20);
  sampler.Sample(logits.data(), params, {prompt.data(), 3, output.data(), 3}, 0);
  EXPECT_EQ(sampler.processed_logits(), logits);
  params.presence_penalty = 0.1f;
  EXPECT_FALSE(params.penalties_neutral());
  sampler.Sample(logits.data(), params, {prompt.data(), 3, output.data(), 3}, 0);
  EXPECT_NE(sampler.processed_logits()[3], logits[3]);
  EXPECT_EQ(sampler.processed_logits()[0], logits[0]);
}

}  // namespace
}  // namespace kvserve::kernels
