// The one KV-fit rule (kvcache/kv_budget.h): output capped at the context, prompt blocks shared
// by the choices.

#include "kvcache/kv_budget.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(KvBudgetTest, OneChoiceHoldsPromptPlusOutputRoundedUpToBlocks) {
  const KvBudget budget = KvBudgetFor(100, 150, 1, 0, 16);
  EXPECT_EQ(budget.output_tokens, 150);
  EXPECT_EQ(budget.blocks, 16);  // 250 tokens
}

TEST(KvBudgetTest, OutputIsCappedAtTheContextLength) {
  // A 5-token prompt asking for the whole advertised max_tokens (context - 1) needs exactly the
  // context's blocks, not one more: it fits a pool that holds the context.
  const KvBudget budget = KvBudgetFor(5, 5823, 1, 5824, 16);
  EXPECT_EQ(budget.output_tokens, 5819);
  EXPECT_EQ(budget.blocks, 364);
}

TEST(KvBudgetTest, MaxTokensZeroRunsToTheEndOfTheContext) {
  EXPECT_EQ(KvBudgetFor(100, 0, 1, 256, 16).output_tokens, 156);
  EXPECT_EQ(KvBudgetFor(100, 0, 1, 256, 16).blocks, 16);
}

TEST(KvBudgetTest, ChoicesShareThePromptsFullBlocks) {
  // 6 full prompt blocks shared; each choice holds ceil(250 / 16) - 6 = 10 more.
  EXPECT_EQ(KvBudgetFor(100, 150, 4, 0, 16).blocks, 6 + 4 * 10);
  EXPECT_EQ(KvBudgetFor(100, 150, 0, 0, 16).blocks, 16);  // n 0 means 1
}

TEST(KvBudgetTest, APromptPastTheContextStillNeedsRoomForOneToken) {
  EXPECT_EQ(KvBudgetFor(300, 10, 1, 256, 16).output_tokens, 1);
  EXPECT_EQ(KvBudgetFor(300, 10, 1, 256, 16).blocks, 19);
}

}  // namespace
}  // namespace kvserve
