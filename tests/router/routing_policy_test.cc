// The routing cost (routing_policy.h): the worked example of docs/routing.md, the fit rule (never
// a worker that cannot fit), the verdicts, and the migration preference.

#include "router/routing_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

// docs/routing.md, "Worked example".
RoutingQuery ExampleQuery() {
  return RoutingQuery{
      .prompt_tokens = 1000, .max_tokens = 200, .block_size = 16, .largest_pool_blocks = 1000};
}
WorkerLoad ExampleA() {
  return WorkerLoad{.total_blocks = 1000,
                    .free_blocks = 300,
                    .evictable_blocks = 100,
                    .running_requests = 10,
                    .matched_blocks = 40};
}
WorkerLoad ExampleB() {
  return WorkerLoad{.total_blocks = 1000,
                    .free_blocks = 800,
                    .reserved_blocks = 50,
                    .running_requests = 2,
                    .waiting_requests = 1,
                    .outstanding_requests = 1};
}

TEST(RoutingPolicyTest, WorkedExampleFromTheDocs) {
  const RoutingWeights weights;
  const WorkerCost a = CostOf(ExampleQuery(), ExampleA(), weights);
  EXPECT_TRUE(a.fits);
  EXPECT_EQ(a.cached_blocks, 40);
  EXPECT_EQ(a.charged_blocks, 75);
  EXPECT_DOUBLE_EQ(a.cost, 360 + 2048 * 0.775 + 64 * 10);
  const WorkerCost b = CostOf(ExampleQuery(), ExampleB(), weights);
  EXPECT_TRUE(b.fits);
  EXPECT_EQ(b.charged_blocks, 75);
  EXPECT_DOUBLE_EQ(b.cost, 1000 + 2048 * 0.325 + 512 * 2 + 64 * 2);
  const std::vector<WorkerLoad> loads = {ExampleB(), ExampleA()};
  const RoutingChoice choice = ChooseWorker(ExampleQuery(), loads, weights);
  EXPECT_EQ(choice.verdict, RouteVerdict::kRouted);
  EXPECT_EQ(choice.index, 1) << "the cached prefix outweighs the busier pool";
  EXPECT_EQ(choice.needed_blocks, 75);
}

TEST(RoutingPolicyTest, CachedBlocksHeldByRunningRequestsAreNotCharged) {
  WorkerLoad a = ExampleA();
  a.evictable_blocks = 0;  // every cached block is held by a running request
  EXPECT_EQ(CostOf(ExampleQuery(), a, {}).charged_blocks, 75 - 40);
  a.evictable_blocks = 15;  // at most 15 of them may be evictable
  EXPECT_EQ(CostOf(ExampleQuery(), a, {}).charged_blocks, 75 - 40 + 15);
}

TEST(RoutingPolicyTest, TheLastPromptTokenIsNeverCountedAsCached) {
  const RoutingQuery query{
      .prompt_tokens = 32, .max_tokens = 1, .block_size = 16, .largest_pool_blocks = 10};
  const WorkerLoad load{.total_blocks = 10, .free_blocks = 10, .matched_blocks = 2};
  EXPECT_EQ(CostOf(query, load, {}).cached_blocks, 1);
}

TEST(RoutingPolicyTest, NeverPicksAWorkerThatCannotFit) {
  WorkerLoad a = ExampleA();
  a.free_blocks = 74;  // one block short of the 75 it would be charged
  const std::vector<WorkerLoad> loads = {a, ExampleB()};
  const RoutingChoice choice = ChooseWorker(ExampleQuery(), loads, {});
  EXPECT_EQ(choice.verdict, RouteVerdict::kRouted);
  EXPECT_EQ(choice.index, 1);
}

TEST(RoutingPolicyTest, ReservationsCountAgainstFreeBlocks) {
  WorkerLoad b = ExampleB();
  b.reserved_blocks = 726;  // 800 - 726 = 74 < 75
  EXPECT_FALSE(CostOf(ExampleQuery(), b, {}).fits);
  b.reserved_blocks = 2000;  // more than free: nothing available, no underflow
  EXPECT_FALSE(CostOf(ExampleQuery(), b, {}).fits);
}

TEST(RoutingPolicyTest, AWorkerWhoseWaitingQueueWouldBeFullIsNotChosen) {
  // B has 1 waiting and 1 outstanding request: with a limit of 2 its queue is full (the worker
  // would refuse with RESOURCE_EXHAUSTED), so the request goes to A, or waits when A is full too.
  WorkerLoad b = ExampleB();
  b.max_waiting_requests = 2;
  EXPECT_FALSE(CostOf(ExampleQuery(), b, {}).fits);
  b.max_waiting_requests = 3;
  EXPECT_TRUE(CostOf(ExampleQuery(), b, {}).fits);
  b.max_waiting_requests = 0;  // not reported: no limit known
  EXPECT_TRUE(CostOf(ExampleQuery(), b, {}).fits);

  b.max_waiting_requests = 2;
  WorkerLoad a = ExampleA();
  const std::vector<WorkerLoad> loads = {a, b};
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}).index, 0);
  a.max_waiting_requests = 1;
  a.outstanding_requests = 1;
  const std::vector<WorkerLoad> full = {a, b};
  EXPECT_EQ(ChooseWorker(ExampleQuery(), full, {}).verdict, RouteVerdict::kNoFitNow);
}

TEST(RoutingPolicyTest, VerdictsTellNeverFitsFromNotNowFromNoWorker) {
  RoutingQuery query = ExampleQuery();
  WorkerLoad full = ExampleB();
  full.free_blocks = 10;
  full.reserved_blocks = 0;
  const std::vector<WorkerLoad> loads = {full};
  EXPECT_EQ(ChooseWorker(query, loads, {}).verdict, RouteVerdict::kNoFitNow);
  EXPECT_EQ(ChooseWorker(query, {}, {}).verdict, RouteVerdict::kNoWorker);
  query.max_tokens = 1000 * 16;  // more than the largest pool even when empty
  const RoutingChoice never = ChooseWorker(query, loads, {});
  EXPECT_EQ(never.verdict, RouteVerdict::kNeverFits);
  EXPECT_EQ(never.index, -1);
  EXPECT_EQ(ChooseWorker(query, {}, {}).verdict, RouteVerdict::kNeverFits)
      << "too large is final even while no worker is routable";
}

TEST(RoutingPolicyTest, MigrationPrefersTheLongestCachedPrefix) {
  RoutingQuery query = ExampleQuery();
  WorkerLoad short_prefix = ExampleB();
  short_prefix.matched_blocks = 10;
  WorkerLoad long_prefix = ExampleB();
  long_prefix.matched_blocks = 20;
  long_prefix.waiting_requests = 30;  // far costlier by load
  const std::vector<WorkerLoad> loads = {short_prefix, long_prefix};
  EXPECT_EQ(ChooseWorker(query, loads, {}).index, 0);
  query.prefer_longest_prefix = true;
  EXPECT_EQ(ChooseWorker(query, loads, {}).index, 1);
}

TEST(RoutingPolicyTest, EqualCostGoesToFewerOutstandingThenTheFirst) {
  WorkerLoad a = ExampleB();
  a.outstanding_requests = 2;
  a.waiting_requests = 0;
  WorkerLoad b = ExampleB();
  b.outstanding_requests = 1;
  b.waiting_requests = 1;  // same queue term as a
  std::vector<WorkerLoad> loads = {a, b};
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}).index, 1);
  loads = {b, b};
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}).index, 0);
}

TEST(RoutingPolicyTest, WeightsValidateNamesTheField) {
  RoutingWeights weights;
  KVSERVE_EXPECT_OK(weights.Validate());
  weights.pool_usage_cost = -1;
  const absl::Status status = weights.Validate();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pool_usage_cost")));
}

TEST(RoutingPolicyTest, MaxTokensAreCappedAtTheContextLikeTheWorkerDoes) {
  // 5 prompt tokens + 5823 max_tokens against a 5824-token context and a 364-block pool: the
  // worker caps the output at the context and accepts; so must the router (kvcache/kv_budget.h).
  RoutingQuery query{.prompt_tokens = 5,
                     .max_tokens = 5823,
                     .context_length = 5824,
                     .block_size = 16,
                     .largest_pool_blocks = 364};
  const std::vector<WorkerLoad> idle = {WorkerLoad{.total_blocks = 364, .free_blocks = 364}};
  const RoutingChoice choice = ChooseWorker(query, idle, RoutingWeights());
  EXPECT_EQ(choice.verdict, RouteVerdict::kRouted);
  EXPECT_EQ(choice.needed_blocks, 364);
  query.num_choices = 2;  // two choices cannot share more than the prompt's (no) full blocks
  EXPECT_EQ(ChooseWorker(query, idle, RoutingWeights()).verdict, RouteVerdict::kNeverFits);
}

}  // namespace
}  // namespace kvserve
