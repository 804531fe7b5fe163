// Engine (the threaded wrapper) with the fake runner: Submit's errors, Abort, drain, shutdown,
// the status subscription and the observer callbacks.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "engine/engine.h"
#include "gtest/gtest.h"
#include "runner/fake_model_runner.h"
#include "runner/fault_injecting_runner.h"
#include "tests/engine/engine_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;
using testing::MakeRequest;
using testing::RequestResult;
using ::testing::_;

constexpr absl::Duration kTimeout = absl::Seconds(30);

class CountingObserver : public EngineObserver {
 public:
  void OnStep(const StepMetrics& step) override {
    ++steps;
    max_tokens = std::max(max_tokens.load(), step.num_scheduled_tokens);
  }
  void OnRequestFinished(const RequestMetrics& request) override {
    ++finished;
    if (request.aborted) ++aborted;
    completion_tokens += request.completion_tokens;
  }
  void OnTokenEmitted(absl::Duration) override { ++inter_tokens; }
  void OnPreemption() override { ++preemptions; }
  void OnPrefixCacheQuery(int64_t query, int64_t hit, int64_t /*host_hit*/) override {
    query_tokens += query;
    hit_tokens += hit;
  }
  std::atomic<int> steps{0}, max_tokens{0}, finished{0}, aborted{0}, completion_tokens{0},
      inter_tokens{0}, preemptions{0};
  std::atomic<int64_t> query_tokens{0}, hit_tokens{0};
};

std::unique_ptr<Engine> MakeEngine(const EngineOptions& options, const FakeModelOptions& model = {},
                                   EngineObserver* observer = nullptr, bool start = true) {
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, std::make_unique<FakeModelRunner>(model), nullptr, observer);
  KVSERVE_EXPECT_OK(engine);
  if (!engine.ok()) return nullptr;
  if (start) {
    KVSERVE_EXPECT_OK((*engine)->Start());
  }
  return *std::move(engine);
}

EngineOptions SmallOptions() {
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 32;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 64;
  options.max_waiting_requests = 8;
  return options;
}

TEST(EngineApiTest, OptionsAreValidatedWithTheOptionNamed) {
  EngineOptions options = SmallOptions();
  options.block_size = 12;
  auto engine = Engine::Create(options, std::make_unique<FakeModelRunner>(), nullptr, nullptr);
  EXPECT_THAT(engine, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_size")));
  options = SmallOptions();
  options.max_num_batched_tokens = 2;
  engine = Engine::Create(options, std::make_unique<FakeModelRunner>(), nullptr, nullptr);
  EXPECT_THAT(engine, StatusIs(_, HasSubstr("max_num_batched_tokens")));
  options = SmallOptions();
  options.max_prefill_tokens_per_step = -1;
  engine = Engine::Create(options, std::make_unique<FakeModelRunner>(), nullptr, nullptr);
  EXPECT_THAT(engine, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("max_prefill_tokens_per_step: must be >= 0")));
  options = SmallOptions();
  options.step_time_target_ms = -5;
  engine = Engine::Create(options, std::make_unique<FakeModelRunner>(), nullptr, nullptr);
  EXPECT_THAT(engine, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("step_time_target_ms: must be >= 0")));
  options = SmallOptions();
  options.num_kv_blocks = 0;
  options.kv_memory_bytes = 100 * 16 * 1024;  // 100 blocks of the fake's 16 KiB
  engine = Engine::Create(options, std::make_unique<FakeModelRunner>(), nullptr, nullptr);
  KVSERVE_ASSERT_OK(engine);
  EXPECT_EQ((*engine)->num_kv_blocks(), 100);
}

TEST(EngineApiTest, SubmitRefusesWhatCanNeverRun) {
  FakeModelOptions model;
  model.max_context_len = 256;
  auto engine = MakeEngine(SmallOptions(), model, nullptr, /*start=*/false);
  EXPECT_THAT(engine->Submit(MakeRequest("a", {1, 2}, 4)),
              StatusIs(absl::StatusCode::kUnavailable));  // not started
  KVSERVE_ASSERT_OK(engine->Start());
  auto bad_token = engine->Submit(MakeRequest("a", {1, 999}, 4));
  EXPECT_THAT(bad_token,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prompt_token_ids[1]")));
  EXPECT_THAT(engine->Submit(MakeRequest("a", {}, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      engine->Submit(MakeRequest("a", std::vector<int32_t>(256, 1), 4)),
      StatusIs(absl::StatusCode::kResourceExhausted));  // no room left in the context window
  EngineOptions tiny = SmallOptions();
  tiny.num_kv_blocks = 4;
  auto small_pool = MakeEngine(tiny, model);
  EXPECT_THAT(small_pool->Submit(MakeRequest("a", std::vector<int32_t>(64, 1), 4)),
              StatusIs(absl::StatusCode::kResourceExhausted));  // 65 tokens need 5 blocks of 16
  EngineRequest many = MakeRequest("a", {1, 2}, 4);
  many.n = 17;
  EXPECT_THAT(engine->Submit(many), StatusIs(absl::StatusCode::kInvalidArgument));
  EngineRequest top_p = MakeRequest("a", {1, 2}, 4);
  top_p.sampling.top_p = 0;
  EXPECT_THAT(engine->Submit(top_p), StatusIs(_, HasSubstr("sampling.top_p")));
}

TEST(EngineApiTest, DuplicateLiveIdAndFullQueueAreRefused) {
  EngineOptions options = SmallOptions();
  options.max_num_seqs = 1;
  options.max_num_batched_tokens = 16;
  options.max_waiting_requests = 2;
  FakeModelOptions model;
  model.step_delay = absl::Milliseconds(20);
  auto engine = MakeEngine(options, model);
  auto running = engine->Submit(MakeRequest("r0", {1, 2, 3}, 200));
  KVSERVE_ASSERT_OK(running);
  EngineOutput first;
  ASSERT_EQ((*running)->Pop(kTimeout, &first), RequestStream::PopResult::kOutput);
  // Wait until the engine's books show r0 running (it counts as queued until then).
  const absl::Time deadline = absl::Now() + kTimeout;
  while (engine->Stats().running_requests != 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_THAT(engine->Submit(MakeRequest("r0", {1}, 4)),
              StatusIs(absl::StatusCode::kAlreadyExists));
  KVSERVE_ASSERT_OK(engine->Submit(MakeRequest("r1", {1}, 4)));
  KVSERVE_ASSERT_OK(engine->Submit(MakeRequest("r2", {1}, 4)));
  EXPECT_THAT(engine->Submit(MakeRequest("r3", {1}, 4)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  KVSERVE_ASSERT_OK(engine->Abort("r0"));
  EXPECT_TRUE(engine->WaitIdle(kTimeout));
}

TEST(EngineApiTest, AbortMidGenerationClosesTheStreamAndFreesBlocks) {
  CountingObserver observer;
  FakeModelOptions model;
  model.step_delay = absl::Milliseconds(2);
  auto engine = MakeEngine(SmallOptions(), model, &observer);
  std::vector<int32_t> prompt(40, 7);
  auto stream = engine->Submit(MakeRequest("victim", prompt, 400));
  KVSERVE_ASSERT_OK(stream);
  EngineOutput output;
  ASSERT_EQ((*stream)->Pop(kTimeout, &output), RequestStream::PopResult::kOutput);
  KVSERVE_ASSERT_OK(engine->Abort("victim"));
  RequestResult result;
  result.DrainUntilEnd(**stream, kTimeout);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_FALSE(result.usage.has_value());
  ASSERT_TRUE(engine->WaitIdle(kTimeout));
  const absl::Time deadline = absl::Now() + kTimeout;
  while (engine->Stats().used_blocks != 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const EngineStats stats = engine->Stats();
  EXPECT_EQ(stats.used_blocks, 0);
  EXPECT_EQ(stats.free_blocks, stats.total_blocks);
  EXPECT_EQ(stats.running_requests, 0);
  EXPECT_THAT(engine->Abort("victim"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(observer.aborted.load(), 1);
}

TEST(EngineApiTest, DrainFinishesRunningRequestsAndRefusesNewOnes) {
  auto engine = MakeEngine(SmallOptions());
  auto stream = engine->Submit(MakeRequest("a", {1, 2, 3}, 30));
  KVSERVE_ASSERT_OK(stream);
  engine->StopAccepting();
  EXPECT_THAT(engine->Submit(MakeRequest("b", {1}, 4)), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(engine->WaitIdle(kTimeout));
  RequestResult result;
  result.DrainUntilEnd(**stream, kTimeout);
  KVSERVE_EXPECT_OK(result.status);
  EXPECT_EQ(result.choices[0].tokens.size(), 30u);
  ASSERT_TRUE(result.usage.has_value());
  EXPECT_EQ(result.usage->completion_tokens, 30);
}

TEST(EngineApiTest, ShutdownEndsLiveRequestsWithUnavailable) {
  FakeModelOptions model;
  model.step_delay = absl::Milliseconds(5);
  auto engine = MakeEngine(SmallOptions(), model);
  auto stream = engine->Submit(MakeRequest("a", {1, 2, 3}, 500));
  KVSERVE_ASSERT_OK(stream);
  engine->Shutdown();
  RequestResult result;
  result.DrainUntilEnd(**stream, kTimeout);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(engine->Submit(MakeRequest("b", {1}, 4)), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(EngineApiTest, ARunnerFailureEndsLiveRequestsWithInternalAndFailsTheEngine) {
  FakeModelOptions model;
  model.step_delay = absl::Milliseconds(2);
  absl::StatusOr<std::unique_ptr<Engine>> created = Engine::Create(
      SmallOptions(),
      std::make_unique<FaultInjectingRunner>(std::make_unique<FakeModelRunner>(model), 5), nullptr,
      nullptr);
  KVSERVE_ASSERT_OK(created);
  Engine& engine = **created;
  std::atomic<int> failures = 0;
  engine.SetFailureListener([&](const absl::Status& status) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal));
    ++failures;
  });
  KVSERVE_ASSERT_OK(engine.Start());
  auto stream = engine.Submit(MakeRequest("a", {1, 2, 3}, 100));
  KVSERVE_ASSERT_OK(stream);
  RequestResult result;
  result.DrainUntilEnd(**stream, kTimeout);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kInternal, HasSubstr("fault injection")));
  EXPECT_EQ(failures, 1);
  EXPECT_THAT(engine.failure(), StatusIs(absl::StatusCode::kInternal));
  // Stats say so once the step that failed has been published.
  const absl::Time deadline = absl::Now() + kTimeout;
  while (!engine.Stats().failed && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(engine.Stats().failed);
  const auto refused = engine.Submit(MakeRequest("b", {1}, 4));
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("failed")));
}

TEST(EngineApiTest, StatusSubscriptionStartsWithASnapshotThenGaplessBatches) {
  CountingObserver observer;
  auto engine = MakeEngine(SmallOptions(), {}, &observer);
  std::shared_ptr<StatusSubscription> subscription = engine->SubscribeStatus();
  StatusUpdate update;
  ASSERT_EQ(subscription->Pop(kTimeout, &update), StatusSubscription::PopResult::kUpdate);
  ASSERT_TRUE(update.snapshot.has_value());
  EXPECT_EQ(update.snapshot->epoch, engine->Stats().epoch);
  EXPECT_NE(update.epoch, 0u);
  uint64_t last_sequence = update.snapshot->sequence_number;
  absl::flat_hash_set<BlockHash> cached(update.snapshot->hashes.begin(),
                                        update.snapshot->hashes.end());
  std::vector<int32_t> prompt(64, 3);
  for (int i = 0; i < 64; ++i) prompt[i] = i;
  auto stream = engine->Submit(MakeRequest("a", prompt, 8));
  KVSERVE_ASSERT_OK(stream);
  RequestResult result;
  result.DrainUntilEnd(**stream, kTimeout);
  ASSERT_TRUE(engine->WaitIdle(kTimeout));
  // Collect updates until the capacity shows the pool free again.
  EngineStats last;
  const absl::Time deadline = absl::Now() + kTimeout;
  while (absl::Now() < deadline) {
    if (subscription->Pop(absl::Milliseconds(200), &update) !=
        StatusSubscription::PopResult::kUpdate) {
      if (last.used_blocks == 0 && last.total_blocks > 0) break;
      continue;
    }
    EXPECT_FALSE(update.snapshot.has_value());
    for (const KvEventBatch& batch : update.batches) {
      EXPECT_EQ(batch.sequence_number, last_sequence + 1);
      last_sequence = batch.sequence_number;
      for (const KvEvent& event : batch.events) {
        if (event.kind == KvEventKind::kStored) cached.insert(event.hash);
        if (event.kind == KvEventKind::kRemoved) cached.erase(event.hash);
      }
    }
    last = update.stats;
  }
  EXPECT_EQ(last.used_blocks, 0);
  EXPECT_EQ(last.free_blocks, last.total_blocks);
  EXPECT_EQ(cached.size(), 4u);  // the prompt's 4 full blocks (71 tokens known, 4 full)
  subscription->Close();
  EXPECT_EQ(observer.finished.load(), 1);
  EXPECT_EQ(observer.completion_tokens.load(), 8);
  EXPECT_EQ(observer.inter_tokens.load(), 7);
  EXPECT_EQ(observer.query_tokens.load(), 64);
  EXPECT_GT(observer.steps.load(), 0);
}

}  // namespace
}  // namespace kvserve
