// StepTimeEstimator: the decode line and the prompt token's cost recovered from steps, and the
// prompt tokens that fit a target.
#include "engine/step_time_estimator.h"

#include "gtest/gtest.h"

namespace kvserve {
namespace {

// A machine whose steps take 5 ms + 0.5 ms per decode + 0.25 ms per prompt token.
double StepMs(int decodes, int prompt_tokens) { return 5.0 + 0.5 * decodes + 0.25 * prompt_tokens; }

TEST(StepTimeEstimatorTest, KnowsNothingBeforeItHasSeenBothKindsOfStep) {
  StepTimeEstimator estimator;
  EXPECT_FALSE(estimator.DecodeStepMs(8).has_value());
  EXPECT_FALSE(estimator.PromptTokensWithin(20, 8, 16).has_value());
  estimator.Observe(8, 64, StepMs(8, 64));  // no decode line yet: cannot be split
  EXPECT_FALSE(estimator.PromptTokenMs().has_value());
  estimator.Observe(8, 0, StepMs(8, 0));
  ASSERT_TRUE(estimator.DecodeStepMs(8).has_value());
  EXPECT_FALSE(estimator.PromptTokensWithin(20, 8, 16).has_value());  // no prompt cost yet
}

TEST(StepTimeEstimatorTest, RecoversTheStepTimesAndFillsTheTarget) {
  StepTimeEstimator estimator;
  for (int round = 0; round < 5; ++round) {
    for (int decodes : {4, 8, 16, 32}) estimator.Observe(decodes, 0, StepMs(decodes, 0));
  }
  ASSERT_TRUE(estimator.DecodeStepMs(10).has_value());
  EXPECT_NEAR(*estimator.DecodeStepMs(10), StepMs(10, 0), 1e-6);
  EXPECT_NEAR(*estimator.DecodeStepMs(64), StepMs(64, 0), 1e-6);  // beyond the data: the line

  estimator.Observe(10, 4, StepMs(10, 4) + 100);  // too few prompt tokens to say anything
  EXPECT_FALSE(estimator.PromptTokenMs().has_value());
  estimator.Observe(10, 64, StepMs(10, 64));
  estimator.Observe(20, 32, StepMs(20, 32));
  ASSERT_TRUE(estimator.PromptTokenMs().has_value());
  EXPECT_NEAR(*estimator.PromptTokenMs(), 0.25, 1e-6);

  // 10 decodes take 10 ms: a 20 ms step has room for 40 prompt tokens.
  EXPECT_EQ(estimator.PromptTokensWithin(20, 10, 16), 40);
  // Decodes alone past the target: prompts still get the minimum.
  EXPECT_EQ(estimator.PromptTokensWithin(8, 10, 16), 16);
}

TEST(StepTimeEstimatorTest, FollowsAMachineThatSlowsDown) {
  StepTimeEstimator estimator;
  for (int i = 0; i < 20; ++i) estimator.Observe(8 + i % 2, 0, StepMs(8 + i % 2, 0));
  for (int i = 0; i < 200; ++i) estimator.Observe(8 + i % 2, 0, 2 * StepMs(8 + i % 2, 0));
  EXPECT_NEAR(*estimator.DecodeStepMs(8), 2 * StepMs(8, 0), 0.2);  // the old steps weigh ~2%
}

}  // namespace
}  // namespace kvserve
