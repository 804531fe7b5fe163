// Scheduling with a host KV tier, driven step by step (EngineCore + FakeModelRunner): preemption
// by swap, evicted prefixes served from host memory, and loads that run beside the step that
// issues them. The fake runner reads every context back from its KV slots, so a wrong copy, or a
// load read before it landed, fails the step.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "runner/fake_model_runner.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/scheduler_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using testing::ExpectAllBlocksFree;
using testing::MakeCore;
using testing::MakeRequest;
using testing::RandomPrompt;
using testing::RequestResult;
using testing::RunAll;
using testing::RunCore;
using testing::SubmitToCore;

// Preemption by swap: preempted sequences resume from their kept partial blocks (and their
// cached full blocks) and give the outputs of an unpreempted run, computing fewer tokens than
// preemption by recompute. The fake runner checks every slot it reads, so a wrong restore fails.
TEST(SchedulerTest, SwapPreemptionResumesWithoutRecomputingThePartialBlock) {
  std::mt19937 rng(7);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(
        MakeRequest("r" + std::to_string(i), RandomPrompt(rng, 21 + 5 * i), 40, 0.9f, 500 + i));
  }
  EngineOptions roomy;
  roomy.block_size = 8;
  roomy.num_kv_blocks = 512;
  roomy.max_num_seqs = 8;
  roomy.max_num_batched_tokens = 64;
  const std::map<std::string, RequestResult> expected = RunAll(roomy, requests);
  struct Outcome {
    int64_t computed_tokens = 0;
    int64_t preemptions = 0;
    int64_t swapped_in_tokens = 0;
  };
  auto run_tight = [&](PreemptionMode mode) {
    EngineOptions tight = roomy;
    tight.num_kv_blocks = 24;
    tight.host_kv_bytes = 128 * FakeModelOptions{}.kv_bytes_per_token * tight.block_size;
    tight.preemption_mode = mode;
    auto runner = std::make_unique<FakeModelRunner>();
    FakeModelRunner* fake = runner.get();
    auto core = EngineCore::Create(tight, std::move(runner), nullptr, nullptr);
    KVSERVE_EXPECT_OK(core);
    std::map<std::string, std::shared_ptr<RequestStream>> streams;
    for (const EngineRequest& request : requests) {
      streams[request.request_id] = SubmitToCore(**core, request);
    }
    RunCore(**core);
    for (auto& [id, stream] : streams) {
      RequestResult result;
      result.Drain(*stream);
      KVSERVE_EXPECT_OK(result.status);
      EXPECT_EQ(result.choices[0].tokens, expected.at(id).choices.at(0).tokens) << id;
    }
    ExpectAllBlocksFree(**core);
    EXPECT_EQ((*core)->manager().host_pool()->num_swap_blocks(), 0);
    return Outcome{.computed_tokens = fake->num_computed_tokens(),
                   .preemptions = (*core)->Stats().num_preemptions,
                   .swapped_in_tokens = (*core)->manager().Stats().swapped_in_tokens};
  };
  const Outcome recompute = run_tight(PreemptionMode::kRecompute);
  const Outcome swap = run_tight(PreemptionMode::kSwap);
  EXPECT_GT(recompute.preemptions, 0);
  EXPECT_GT(swap.preemptions, 0);
  EXPECT_EQ(recompute.swapped_in_tokens, 0);
  EXPECT_GT(swap.swapped_in_tokens, 0);
  EXPECT_LT(swap.computed_tokens, recompute.computed_tokens);
  std::printf(
      "preemptions: recompute %lld, swap %lld; computed tokens: recompute %lld, swap %lld "
      "(%lld restored from the host tier)\n",
      static_cast<long long>(recompute.preemptions), static_cast<long long>(swap.preemptions),
      static_cast<long long>(recompute.computed_tokens),
      static_cast<long long>(swap.computed_tokens), static_cast<long long>(swap.swapped_in_tokens));

  // Swap needs a host tier.
  EngineOptions untiered = roomy;
  untiered.preemption_mode = PreemptionMode::kSwap;
  EXPECT_THAT(EngineCore::Create(untiered, std::make_unique<FakeModelRunner>(), nullptr, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Multi-turn conversations whose working set is several times the device pool, with sampled
// and parallel (n = 2) choices and preemption: a host tier gives every request the tokens it
// gets without one, while serving evicted prefixes from host memory (the fake model reads every
// position of every context back from the KV slots, so a wrong copy fails the step).
TEST(SchedulerTest, HostTierServesEvictedPrefixesWithTheSameOutputs) {
  const uint32_t seed = 99;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  EngineOptions options;
  options.block_size = 8;
  options.num_kv_blocks = 24;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 48;
  EngineOptions tiered = options;
  tiered.host_kv_bytes = 64 * FakeModelOptions{}.kv_bytes_per_token * options.block_size;

  auto run = [&](const EngineOptions& engine_options, EngineStats* stats) {
    std::mt19937 rng(seed);
    std::unique_ptr<EngineCore> core = MakeCore(engine_options);
    std::vector<std::vector<int32_t>> conversations(6);
    std::map<std::string, RequestResult> results;
    for (int turn = 0; turn < 4; ++turn) {
      std::map<std::string, std::shared_ptr<RequestStream>> streams;
      for (size_t c = 0; c < conversations.size(); ++c) {
        const std::vector<int32_t> more = RandomPrompt(rng, 6 + static_cast<int>(rng() % 12));
        conversations[c].insert(conversations[c].end(), more.begin(), more.end());
        const std::string id = "c" + std::to_string(c) + "t" + std::to_string(turn);
        EngineRequest request = MakeRequest(id, conversations[c], 24, 0.8f, 1000 + c);
        if (c % 3 == 0) request.n = 2;
        streams[id] = SubmitToCore(*core, request);
      }
      RunCore(*core);
      for (auto& [id, stream] : streams) results[id].Drain(*stream);
    }
    *stats = core->Stats();
    ExpectAllBlocksFree(*core);
    return results;
  };
  EngineStats with_stats, without_stats;
  auto with_tier = run(tiered, &with_stats);
  auto without = run(options, &without_stats);
  ASSERT_EQ(with_tier.size(), without.size());
  for (auto& [id, result] : without) {
    KVSERVE_EXPECT_OK(result.status);
    ASSERT_EQ(with_tier[id].choices.size(), result.choices.size()) << id;
    for (auto& [index, choice] : result.choices) {
      EXPECT_EQ(with_tier[id].choices[index].tokens, choice.tokens) << id << " choice " << index;
    }
  }
  EXPECT_EQ(with_stats.host_blocks, 64);
  EXPECT_GT(with_stats.prefix_host_hit_tokens, 0);
  EXPECT_GT(with_stats.host_stored_blocks, 0);
  EXPECT_GT(with_stats.prefix_hit_tokens, without_stats.prefix_hit_tokens);
  EXPECT_GT(with_stats.num_preemptions, 0) << "the scenario must preempt, as it claims";
}

// Records whether each step's forward waited for host-tier loads.
class LoadWaitObserver : public EngineObserver {
 public:
  void OnStep(const StepMetrics& step) override { waits_ += step.waited_for_host_loads; }
  int waits() const { return waits_; }

 private:
  int waits_ = 0;
};

// A prompt whose prefix was evicted to the host tier arrives while another request decodes: its
// blocks load beside that step's forward and it computes from the next step on, so no step
// waits for the copies (the fake runner lands a load only at the join, so a forward that read
// the blocks early would fail its context check); without deferral the same step loads and
// computes it, and waits. The tokens are the same either way.
TEST(SchedulerTest, HostLoadsRunBesideTheStepAndTheirSequenceComputesInTheNext) {
  std::mt19937 rng(31);
  const std::vector<int32_t> shared = RandomPrompt(rng, 64);  // 8 full blocks
  std::vector<int32_t> resumed = shared;
  for (int32_t t : RandomPrompt(rng, 5)) resumed.push_back(t);
  std::vector<std::vector<int32_t>> fillers;
  for (int i = 0; i < 3; ++i) fillers.push_back(RandomPrompt(rng, 80));
  const std::vector<int32_t> decoder = RandomPrompt(rng, 6);

  struct Outcome {
    std::vector<int32_t> tokens;
    int waits = 0;
    bool deferred = false;  // the plan that loaded `resumed` did not compute it
  };
  auto run = [&](bool defer) {
    EngineOptions options;
    options.block_size = 8;
    options.num_kv_blocks = 24;
    options.max_num_seqs = 4;
    options.max_num_batched_tokens = 64;
    options.host_kv_bytes = 64 * FakeModelOptions{}.kv_bytes_per_token * options.block_size;
    options.defer_host_loads = defer;
    LoadWaitObserver observer;
    auto core =
        EngineCore::Create(options, std::make_unique<FakeModelRunner>(), nullptr, &observer);
    KVSERVE_EXPECT_OK(core);
    Outcome outcome;
    RunCore(**core);
    SubmitToCore(**core, MakeRequest("first", shared, 1));
    RunCore(**core);
    for (size_t i = 0; i < fillers.size(); ++i) {  // evict `shared` to the host tier
      SubmitToCore(**core, MakeRequest("filler" + std::to_string(i), fillers[i], 1));
      RunCore(**core);
    }
    const int waits_before = observer.waits();
    auto decoding = SubmitToCore(**core, MakeRequest("decoder", decoder, 12));
    for (int i = 0; i < 2; ++i) KVSERVE_EXPECT_OK((*core)->Step());
    auto stream = SubmitToCore(**core, MakeRequest("resumed", resumed, 6, 0.7f, 5));
    bool loaded = false;
    RunCore(**core, [&](const StepPlan& plan) {
      const bool loads = std::any_of(plan.host_copies.begin(), plan.host_copies.end(),
                                     [](const HostCopy& copy) { return !copy.to_host; });
      const bool computes = std::any_of(
          plan.sequences.begin(), plan.sequences.end(),
          [&](const ScheduledSequence& seq) { return seq.is_new && seq.token_ids == resumed; });
      if (loads) {
        EXPECT_FALSE(loaded) << "one step loads the prefix";
        loaded = true;
        outcome.deferred = !computes;
      }
    });
    EXPECT_TRUE(loaded) << "the prefix must come back from the host tier";
    RequestResult result;
    result.Drain(*stream);
    KVSERVE_EXPECT_OK(result.status);
    outcome.tokens = result.choices[0].tokens;
    outcome.waits = observer.waits() - waits_before;
    EXPECT_GT((*core)->manager().Stats().prefix_host_hit_tokens, 0);
    ExpectAllBlocksFree(**core);
    return outcome;
  };
  const Outcome deferred = run(true);
  const Outcome eager = run(false);
  EXPECT_TRUE(deferred.deferred);
  EXPECT_EQ(deferred.waits, 0);
  EXPECT_FALSE(eager.deferred);
  EXPECT_EQ(eager.waits, 1);
  EXPECT_EQ(deferred.tokens, eager.tokens);
  EXPECT_EQ(deferred.tokens.size(), 6u);
}

}  // namespace
}  // namespace kvserve
