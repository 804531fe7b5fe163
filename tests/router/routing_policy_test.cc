// The routing cost (routing_policy.h): the worked example of docs/routing.md, the fit rule (never
// a worker that cannot fit), the verdicts, the migration preference, and the KV transfer term
// (who can receive, how many blocks, what they cost).

#include "router/routing_policy.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::IsOk;
using ::kvserve::testing::StatusIs;
using ::testing::AllOf;
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

TEST(RoutingPolicyTest, AHostTierHitCostsACopyNotAPrefill) {
  RoutingWeights weights;
  weights.host_hit_token_cost = 0.05;
  // The same worker three ways: its 40 matched blocks on the device, 10 on the device and 30 in
  // its host tier, or nothing cached.
  WorkerLoad device = ExampleB();
  device.matched_blocks = 40;
  WorkerLoad tiered = ExampleB();
  tiered.matched_blocks = 10;
  tiered.host_matched_blocks = 30;
  const WorkerLoad cold = ExampleB();
  const WorkerCost on_device = CostOf(ExampleQuery(), device, weights);
  const WorkerCost on_host = CostOf(ExampleQuery(), tiered, weights);
  const WorkerCost nothing = CostOf(ExampleQuery(), cold, weights);
  EXPECT_EQ(on_host.cached_blocks, 10);
  EXPECT_EQ(on_host.host_cached_blocks, 30);
  // Host hits need pool blocks like new tokens (nothing to attach), so they are charged.
  EXPECT_EQ(on_host.charged_blocks, nothing.charged_blocks - 10);
  // 1000 prompt tokens: 160 on the device, 480 copied back at 0.05 each, 360 computed.
  EXPECT_DOUBLE_EQ(on_host.cost - nothing.cost,
                   (360 + 0.05 * 480) - 1000 +
                       2048 * (on_host.charged_blocks - nothing.charged_blocks) / 1000.0);
  EXPECT_LT(on_device.cost, on_host.cost);
  EXPECT_LT(on_host.cost, nothing.cost);
  // The host-tier run is capped with the device's at (prompt - 1) / block_size blocks.
  tiered.host_matched_blocks = 500;
  EXPECT_EQ(CostOf(ExampleQuery(), tiered, weights).host_cached_blocks, 62 - 10);
  // A migration prefers the most cached blocks of either tier.
  RoutingQuery migration = ExampleQuery();
  migration.prefer_longest_prefix = true;
  tiered.host_matched_blocks = 35;
  const std::vector<WorkerLoad> loads = {device, tiered};
  EXPECT_EQ(ChooseWorker(migration, loads, weights).index, 1);
  EXPECT_EQ(ChooseWorker(migration, loads, weights).best_cached_blocks, 45);
}

// --- KV block transfer -----------------------------------------------------------------------

// The worked example with a transfer source: A (its 40 cached blocks) is the source, and B can
// receive (the same format, a host tier).
RoutingQuery TransferQuery() {
  RoutingQuery query = ExampleQuery();
  query.source_matched_blocks = 40;
  query.source_kv_transfer_format = "fmt-a";
  return query;
}
WorkerLoad Receiver(WorkerLoad load) {
  load.host_blocks = 100;
  load.kv_transfer_format = "fmt-a";
  return load;
}

TEST(RoutingPolicyTest, ANonHolderFetchingTheBlocksBeatsTheHolderItWouldLoseToRecomputing) {
  const RoutingWeights weights;  // transfer_token_cost 0.1
  const WorkerLoad a = Receiver(ExampleA());
  const WorkerLoad b = Receiver(ExampleB());
  const WorkerCost a_cost = CostOf(TransferQuery(), a, weights);
  const WorkerCost b_cost = CostOf(TransferQuery(), b, weights);
  EXPECT_EQ(a_cost.remote_blocks, 0) << "the source holds its whole match itself";
  EXPECT_DOUBLE_EQ(a_cost.cost, 360 + 2048 * 0.775 + 64 * 10);
  EXPECT_EQ(b_cost.remote_blocks, 40);
  // docs/routing.md: B's prefill term 1000 - 640 + 0.1 * 640 = 424 instead of 1000.
  EXPECT_DOUBLE_EQ(b_cost.cost, 424 + 2048 * 0.325 + 512 * 2 + 64 * 2);
  // Fetched blocks need pool blocks like computed ones: the charge and the fit do not change.
  EXPECT_EQ(b_cost.charged_blocks, 75);
  const std::vector<WorkerLoad> loads = {a, b};
  const RoutingChoice with_transfer = ChooseWorker(TransferQuery(), loads, weights);
  EXPECT_EQ(with_transfer.index, 1);
  EXPECT_EQ(with_transfer.chosen.remote_blocks, 40);
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, weights).index, 0) << "no source: A, as before";
  // A transfer as dear as a prefill gains nothing.
  RoutingWeights dear = weights;
  dear.transfer_token_cost = 1.0;
  EXPECT_EQ(ChooseWorker(TransferQuery(), loads, dear).index, 0);
}

TEST(RoutingPolicyTest, RemoteBlocksAreCappedByTheLastTokenAndStartAfterTheWorkersOwn) {
  const WorkerLoad cold = Receiver(ExampleB());
  RoutingQuery query = TransferQuery();
  query.source_matched_blocks = 500;  // more than the prompt has
  EXPECT_EQ(CostOf(query, cold, {}).remote_blocks, 62) << "(1000 - 1) / 16";
  // After the worker's own pool run and host-tier run: 40 - 10 - 5.
  WorkerLoad partial = cold;
  partial.matched_blocks = 10;
  partial.host_matched_blocks = 5;
  const WorkerCost cost = CostOf(TransferQuery(), partial, {});
  EXPECT_EQ(cost.cached_blocks, 10);
  EXPECT_EQ(cost.host_cached_blocks, 5);
  EXPECT_EQ(cost.remote_blocks, 25);
  EXPECT_EQ(cost.charged_blocks, 75 - 10) << "host and remote blocks are charged as new blocks";
  // A two-block prompt: its second block holds the last token, so only one block can be fetched.
  const RoutingQuery two_blocks{.prompt_tokens = 32,
                                .max_tokens = 1,
                                .block_size = 16,
                                .largest_pool_blocks = 1000,
                                .source_matched_blocks = 2,
                                .source_kv_transfer_format = "fmt-a"};
  RoutingWeights any_run;
  any_run.min_transfer_blocks = 1;
  EXPECT_EQ(CostOf(two_blocks, cold, any_run).remote_blocks, 1);
}

TEST(RoutingPolicyTest, ARunShorterThanMinTransferBlocksIsComputedInstead) {
  RoutingWeights weights;
  ASSERT_EQ(weights.min_transfer_blocks, 2);
  WorkerLoad holder = Receiver(ExampleB());
  holder.matched_blocks = 39;  // one block short of the source's 40
  EXPECT_EQ(CostOf(TransferQuery(), holder, weights).remote_blocks, 0);
  holder.matched_blocks = 38;
  EXPECT_EQ(CostOf(TransferQuery(), holder, weights).remote_blocks, 2);
  weights.min_transfer_blocks = 3;
  EXPECT_EQ(CostOf(TransferQuery(), holder, weights).remote_blocks, 0);
  EXPECT_DOUBLE_EQ(CostOf(TransferQuery(), holder, weights).cost,
                   CostOf(ExampleQuery(), holder, weights).cost)
      << "no transfer: the cost without a source";
}

TEST(RoutingPolicyTest, OnlyAWorkerWithTheSourcesFormatAndAHostTierReceives) {
  const WorkerLoad receiver = Receiver(ExampleB());
  EXPECT_EQ(CostOf(TransferQuery(), receiver, {}).remote_blocks, 40);
  WorkerLoad other_format = receiver;
  other_format.kv_transfer_format = "fmt-b";
  EXPECT_EQ(CostOf(TransferQuery(), other_format, {}).remote_blocks, 0);
  WorkerLoad no_host_tier = receiver;
  no_host_tier.host_blocks = 0;
  EXPECT_EQ(CostOf(TransferQuery(), no_host_tier, {}).remote_blocks, 0);
  // Fetched blocks land in the host tier: no more than it holds.
  WorkerLoad small_tier = receiver;
  small_tier.host_blocks = 25;
  EXPECT_EQ(CostOf(TransferQuery(), small_tier, {}).remote_blocks, 25);
  // An empty format moves nothing, even when both are empty.
  RoutingQuery formatless = TransferQuery();
  formatless.source_kv_transfer_format = "";
  WorkerLoad no_format = receiver;
  no_format.kv_transfer_format = "";
  EXPECT_EQ(CostOf(formatless, no_format, {}).remote_blocks, 0);
  // The source itself, its match split over both tiers.
  WorkerLoad source = receiver;
  source.matched_blocks = 30;
  source.host_matched_blocks = 10;
  EXPECT_EQ(CostOf(TransferQuery(), source, {}).remote_blocks, 0);
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

TEST(RoutingPolicyTest, MigrationCountsTheBlocksAWorkerWouldFetch) {
  // A holds 10 blocks of its own and cannot receive; B holds none but can fetch the source's 40.
  RoutingQuery query = TransferQuery();
  query.prefer_longest_prefix = true;
  WorkerLoad own = ExampleB();
  own.matched_blocks = 10;
  const WorkerLoad fetcher = Receiver(ExampleB());
  const std::vector<WorkerLoad> loads = {own, fetcher};
  const RoutingChoice choice = ChooseWorker(query, loads, {});
  EXPECT_EQ(choice.index, 1);
  EXPECT_EQ(choice.chosen.remote_blocks, 40);
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
  weights = RoutingWeights();
  weights.transfer_token_cost = -0.1;
  EXPECT_THAT(weights.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("transfer_token_cost")));
  weights = RoutingWeights();
  weights.min_transfer_blocks = 0;
  EXPECT_THAT(weights.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("min_transfer_blocks")));
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

// --- The baseline policies (--routing_policy) ------------------------------------------------

constexpr RoutingPolicy kAllPolicies[] = {RoutingPolicy::kKvAware, RoutingPolicy::kRoundRobin,
                                          RoutingPolicy::kLeastLoaded, RoutingPolicy::kRandom};

// Three workers: 0 holds the whole prefix but is the busiest and chosen last; 1 is idle and the
// least recently chosen but too full to fit; 2 fits, holds nothing and was chosen second.
std::vector<WorkerLoad> ThreeWorkers() {
  WorkerLoad cached = ExampleA();  // 40 blocks matched, 10 running
  cached.last_chosen = 3;
  WorkerLoad full = ExampleB();
  full.free_blocks = 10;
  full.reserved_blocks = 0;
  full.running_requests = full.waiting_requests = full.outstanding_requests = 0;
  full.last_chosen = 1;
  WorkerLoad cold = ExampleB();  // 4 requests in all
  cold.last_chosen = 2;
  return {cached, full, cold};
}

TEST(RoutingPolicyTest, KvAwareFollowsThePrefixTheOthersIgnoreIt) {
  const std::vector<WorkerLoad> loads = ThreeWorkers();
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}, RoutingPolicy::kKvAware).index, 0);
  // Round robin: the least recently chosen worker that fits (1 does not).
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}, RoutingPolicy::kRoundRobin).index, 2);
  // Least loaded: 2 has 4 requests against 0's 10.
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}, RoutingPolicy::kLeastLoaded).index, 2);
}

TEST(RoutingPolicyTest, RoundRobinCyclesThroughEqualWorkers) {
  std::vector<WorkerLoad> loads(3, ExampleB());
  std::vector<int> chosen;
  for (uint64_t decision = 1; decision <= 6; ++decision) {
    const int index = ChooseWorker(ExampleQuery(), loads, {}, RoutingPolicy::kRoundRobin).index;
    chosen.push_back(index);
    loads[index].last_chosen = decision;  // what ClusterBooks::Route records
  }
  EXPECT_EQ(chosen, (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

TEST(RoutingPolicyTest, LeastLoadedBreaksTiesByAvailableBlocksThenRecency) {
  WorkerLoad a = ExampleB();
  WorkerLoad b = ExampleB();
  b.reserved_blocks = 0;  // same requests, more available blocks
  std::vector<WorkerLoad> loads = {a, b};
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}, RoutingPolicy::kLeastLoaded).index, 1);
  a.last_chosen = 5;
  b = a;
  b.last_chosen = 4;
  loads = {a, b};
  EXPECT_EQ(ChooseWorker(ExampleQuery(), loads, {}, RoutingPolicy::kLeastLoaded).index, 1);
}

TEST(RoutingPolicyTest, RandomDrawsOnlyFittingWorkersAndReachesEach) {
  const std::vector<WorkerLoad> loads = ThreeWorkers();
  std::vector<int> hits(loads.size(), 0);
  RoutingQuery query = ExampleQuery();
  for (uint64_t draw = 0; draw < 10; ++draw) {
    query.random_draw = draw;
    const RoutingChoice choice = ChooseWorker(query, loads, {}, RoutingPolicy::kRandom);
    ASSERT_EQ(choice.verdict, RouteVerdict::kRouted);
    ++hits[choice.index];
  }
  EXPECT_EQ(hits, (std::vector<int>{5, 0, 5})) << "draw % 2 over the fitting workers {0, 2}";
}

TEST(RoutingPolicyTest, EveryPolicyAdmitsAndChargesAlike) {
  RoutingQuery query = ExampleQuery();
  const std::vector<WorkerLoad> loads = ThreeWorkers();
  WorkerLoad full = ExampleB();
  full.free_blocks = 10;
  const std::vector<WorkerLoad> none_fits = {full, full};
  for (RoutingPolicy policy : kAllPolicies) {
    SCOPED_TRACE(RoutingPolicyName(policy));
    const RoutingChoice choice = ChooseWorker(query, loads, {}, policy);
    ASSERT_EQ(choice.verdict, RouteVerdict::kRouted);
    EXPECT_EQ(choice.chosen.charged_blocks, CostOf(query, loads[choice.index], {}).charged_blocks);
    EXPECT_EQ(choice.best_cached_blocks, 40) << "worker 0's prefix, whoever is chosen";
    EXPECT_EQ(ChooseWorker(query, none_fits, {}, policy).verdict, RouteVerdict::kNoFitNow);
    EXPECT_EQ(ChooseWorker(query, {}, {}, policy).verdict, RouteVerdict::kNoWorker);
    RoutingQuery huge = query;
    huge.max_tokens = 1000 * 16;
    EXPECT_EQ(ChooseWorker(huge, loads, {}, policy).verdict, RouteVerdict::kNeverFits);
  }
}

TEST(RoutingPolicyTest, PolicyNamesRoundTripAndAnUnknownOneIsRefused) {
  for (RoutingPolicy policy : kAllPolicies) {
    absl::StatusOr<RoutingPolicy> parsed = ParseRoutingPolicy(RoutingPolicyName(policy));
    ASSERT_THAT(parsed, IsOk());
    EXPECT_EQ(*parsed, policy);
  }
  EXPECT_THAT(ParseRoutingPolicy("prefix"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("kv_aware, round_robin, least_loaded, random"),
                             HasSubstr("'prefix'"))));
}

}  // namespace
}  // namespace kvserve
