// Scheduling behaviour of the engine, driven step by step (EngineCore + FakeModelRunner): token
// budget and sequence cap, decodes before prefills, chunked prefill, preemption by recompute,
// prefix-cache hits, forks for n > 1, and that every block comes back (the host tier's tests:
// scheduler_host_tier_test.cc).
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
using testing::CountStep;
using testing::ExpectAllBlocksFree;
using testing::MakeCore;
using testing::MakeRequest;
using testing::RandomPrompt;
using testing::RequestResult;
using testing::RunAll;
using testing::RunCore;
using testing::StepCounts;
using testing::SubmitToCore;

TEST(SchedulerTest, BudgetAndSequenceCapHoldAtEveryStep) {
  const uint32_t seed = 12345;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 64;
  options.max_num_seqs = 6;
  options.max_num_batched_tokens = 40;
  std::unique_ptr<EngineCore> core = MakeCore(options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::uniform_int_distribution<int> length(1, 150);
  for (int i = 0; i < 24; ++i) {
    streams.push_back(SubmitToCore(
        *core, MakeRequest("r" + std::to_string(i), RandomPrompt(rng, length(rng)), 12)));
  }
  int steps = 0;
  int max_seqs_seen = 0;
  RunCore(*core, [&](const StepPlan& plan) {
    ++steps;
    EXPECT_LE(plan.num_scheduled_tokens(), options.max_num_batched_tokens);
    EXPECT_LE(static_cast<int>(plan.sequences.size()), options.max_num_seqs);
    EXPECT_LE(core->Stats().running_sequences, options.max_num_seqs);
    max_seqs_seen = std::max<int>(max_seqs_seen, static_cast<int>(plan.sequences.size()));
    // Decodes come first in a plan.
    bool seen_prefill = false;
    for (const ScheduledSequence& seq : plan.sequences) {
      const bool decode = !seq.is_new && seq.num_scheduled_tokens == 1;
      if (!decode) seen_prefill = true;
      if (decode) {
        EXPECT_FALSE(seen_prefill) << "decode after a prefill in step " << plan.step_id;
      }
    }
  });
  EXPECT_EQ(max_seqs_seen, options.max_num_seqs);
  for (auto& stream : streams) {
    RequestResult result;
    result.Drain(*stream);
    ASSERT_TRUE(result.ended);
    KVSERVE_EXPECT_OK(result.status);
    EXPECT_EQ(result.choices[0].tokens.size(), 12u);
    EXPECT_EQ(result.choices[0].finish_reason, FinishReason::kLength);
  }
  ExpectAllBlocksFree(*core);
}

TEST(SchedulerTest, LongPromptIsPrefilledInChunks) {
  std::mt19937 rng(7);
  EngineOptions options;
  options.num_kv_blocks = 32;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 32;
  std::unique_ptr<EngineCore> core = MakeCore(options);
  auto stream = SubmitToCore(*core, MakeRequest("long", RandomPrompt(rng, 100), 3));
  std::vector<int32_t> chunks;
  std::vector<bool> sampled;
  RunCore(*core, [&](const StepPlan& plan) {
    ASSERT_EQ(plan.sequences.size(), 1u);
    chunks.push_back(plan.sequences[0].num_scheduled_tokens);
    sampled.push_back(plan.sequences[0].sample);
  });
  EXPECT_EQ(chunks, (std::vector<int32_t>{32, 32, 32, 4, 1, 1}));
  EXPECT_EQ(sampled, (std::vector<bool>{false, false, false, true, true, true}));
  RequestResult result;
  result.Drain(*stream);
  EXPECT_EQ(result.choices[0].tokens.size(), 3u);
  ExpectAllBlocksFree(*core);
}

TEST(SchedulerTest, PrefillCapBoundsEveryStepThatDecodes) {
  std::mt19937 rng(11);
  EngineOptions options;
  options.num_kv_blocks = 64;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 128;
  options.max_prefill_tokens_per_step = 24;
  std::vector<EngineRequest> requests = {MakeRequest("short", RandomPrompt(rng, 10), 30)};
  for (int i = 0; i < 3; ++i) {
    requests.push_back(MakeRequest("long" + std::to_string(i), RandomPrompt(rng, 70), 5));
  }
  std::unique_ptr<EngineCore> core = MakeCore(options);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& request : requests) {
    streams[request.request_id] = SubmitToCore(*core, request);
  }
  std::vector<int32_t> prefill_tokens_with_decodes;
  int32_t first_step_tokens = -1;
  RunCore(*core, [&](const StepPlan& plan) {
    const StepCounts step = CountStep(plan);
    if (first_step_tokens < 0) first_step_tokens = step.prompt_tokens;
    if (step.decodes > 0 && step.prompt_tokens > 0) {
      prefill_tokens_with_decodes.push_back(step.prompt_tokens);
    }
  });
  // Nothing decodes in the first step, so it takes the whole budget; afterwards every step that
  // decodes prefills at most the cap, and the long prompts still finish.
  EXPECT_EQ(first_step_tokens, options.max_num_batched_tokens);
  ASSERT_FALSE(prefill_tokens_with_decodes.empty());
  for (int32_t prefill : prefill_tokens_with_decodes) EXPECT_LE(prefill, 24);
  std::map<std::string, RequestResult> capped;
  for (auto& [id, stream] : streams) capped[id].Drain(*stream);
  ExpectAllBlocksFree(*core);

  // The cap changes when tokens are computed, never which tokens come out.
  options.max_prefill_tokens_per_step = 0;
  std::map<std::string, RequestResult> uncapped = RunAll(options, requests);
  for (const EngineRequest& request : requests) {
    const std::string& id = request.request_id;
    KVSERVE_EXPECT_OK(capped[id].status);
    EXPECT_EQ(capped[id].choices[0].tokens, uncapped[id].choices[0].tokens) << id;
  }
}

TEST(SchedulerTest, StepTimeTargetCapsPromptTokensByTheMeasuredStepTime) {
  // Simulated steps: 2 ms + 0.2 ms per decode + 0.1 ms per prompt token. With one decode, a
  // 6 ms target leaves room for (6 - 2.2) / 0.1 = 38 prompt tokens; a slower (busier) machine
  // only lowers that, to a block (16) at least.
  FakeModelOptions model;
  model.step_time = {.fixed_ms = 2, .prefill_token_ms = 0.1, .decode_token_ms = 0.2};
  EngineOptions options;
  options.num_kv_blocks = 64;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 128;
  options.step_time_target_ms = 6;
  std::unique_ptr<EngineCore> core = MakeCore(options, model);
  std::mt19937 rng(13);
  auto decoding = SubmitToCore(*core, MakeRequest("decoding", RandomPrompt(rng, 10), 60));
  std::vector<std::shared_ptr<RequestStream>> prompts;
  std::vector<int32_t> prompt_tokens_with_decodes;
  int step = 0;
  RunCore(*core, [&](const StepPlan& plan) {
    const StepCounts counts = CountStep(plan);
    if (counts.decodes > 0 && counts.prompt_tokens > 0) {
      prompt_tokens_with_decodes.push_back(counts.prompt_tokens);
    }
    // Long prompts arrive one at a time after a few decode-only steps (never more waiting than
    // decoding, which would lift the cap: scheduler_policy_test.cc).
    if (++step == 5 || step == 15 || step == 25 || step == 35) {
      prompts.push_back(
          SubmitToCore(*core, MakeRequest("p" + std::to_string(step), RandomPrompt(rng, 120), 2)));
    }
  });
  // The first step that mixes them is uncapped (nothing measured yet); from then on each stays
  // near the target.
  ASSERT_GE(prompt_tokens_with_decodes.size(), 3u);
  EXPECT_GT(prompt_tokens_with_decodes.front(), 64);
  for (size_t i = 1; i < prompt_tokens_with_decodes.size(); ++i) {
    EXPECT_LE(prompt_tokens_with_decodes[i], 64) << "mixed step " << i;
    EXPECT_GE(prompt_tokens_with_decodes[i], 1) << "mixed step " << i;
  }
  RequestResult result;
  result.Drain(*decoding);
  EXPECT_EQ(result.choices[0].tokens.size(), 60u);
  for (auto& stream : prompts) {
    RequestResult r;
    r.Drain(*stream);
    KVSERVE_EXPECT_OK(r.status);
    EXPECT_EQ(r.choices[0].tokens.size(), 2u);
  }
  ExpectAllBlocksFree(*core);
}

TEST(SchedulerTest, PreemptedRequestsGiveTheSameOutputAsWithoutPreemption) {
  const uint32_t seed = 99;
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 8; ++i) {
    // Seeded sampling, so a resumed sequence must continue the same random stream.
    EngineRequest request =
        MakeRequest("r" + std::to_string(i), RandomPrompt(rng, 20 + 7 * i), 40, 0.9f, 1000 + i);
    request.sampling.top_k = 50;
    request.sampling.repetition_penalty = 1.2f;
    requests.push_back(std::move(request));
  }
  EngineOptions roomy;
  roomy.block_size = 8;
  roomy.num_kv_blocks = 512;
  roomy.max_num_seqs = 8;
  roomy.max_num_batched_tokens = 64;
  EngineOptions tight = roomy;
  tight.num_kv_blocks = 24;  // far less than 8 sequences of up to ~110 tokens need
  int64_t roomy_preemptions = 0;
  int64_t tight_preemptions = 0;
  auto expected = RunAll(roomy, requests, &roomy_preemptions);
  auto got = RunAll(tight, requests, &tight_preemptions);
  EXPECT_EQ(roomy_preemptions, 0);
  EXPECT_GT(tight_preemptions, 0);
  for (const EngineRequest& request : requests) {
    const auto& want = expected[request.request_id].choices[0];
    const auto& have = got[request.request_id].choices[0];
    EXPECT_EQ(have.tokens, want.tokens) << request.request_id;
    EXPECT_EQ(have.tokens.size(), 40u);
    ASSERT_TRUE(got[request.request_id].usage.has_value());
    EXPECT_EQ(got[request.request_id].usage->completion_tokens, 40);
  }
}

TEST(SchedulerTest, AbortAndFinishReturnEveryBlock) {
  std::mt19937 rng(3);
  EngineOptions options;
  options.num_kv_blocks = 40;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 64;
  std::unique_ptr<EngineCore> core = MakeCore(options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    streams.push_back(
        SubmitToCore(*core, MakeRequest("r" + std::to_string(i), RandomPrompt(rng, 30), 50)));
  }
  for (int step = 0; step < 5; ++step) KVSERVE_ASSERT_OK(core->Step());
  EXPECT_GT(core->manager().Stats().used_blocks, 0);
  KVSERVE_ASSERT_OK(core->AbortRequest("r1", absl::CancelledError("test")));
  KVSERVE_ASSERT_OK(core->AbortRequest("r4", absl::CancelledError("test")));
  EXPECT_THAT(core->AbortRequest("r4", absl::CancelledError("test")),
              StatusIs(absl::StatusCode::kNotFound));
  KVSERVE_EXPECT_OK(core->manager().CheckInvariants());
  RunCore(*core);
  for (int i = 0; i < 6; ++i) {
    RequestResult result;
    result.Drain(*streams[i]);
    ASSERT_TRUE(result.ended);
    if (i == 1 || i == 4) {
      EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kCancelled));
      EXPECT_FALSE(result.usage.has_value());
    } else {
      KVSERVE_EXPECT_OK(result.status);
      EXPECT_EQ(result.choices[0].tokens.size(), 50u);
    }
  }
  ExpectAllBlocksFree(*core);
}

TEST(SchedulerTest, CachedPrefixSkipsItsPrefill) {
  std::mt19937 rng(11);
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 64;
  options.max_num_batched_tokens = 256;
  std::unique_ptr<EngineCore> core = MakeCore(options);
  const std::vector<int32_t> shared = RandomPrompt(rng, 64);
  auto first = SubmitToCore(*core, MakeRequest("first", shared, 4));
  RunCore(*core);
  std::vector<int32_t> second_prompt = shared;
  const std::vector<int32_t> tail = RandomPrompt(rng, 10);
  second_prompt.insert(second_prompt.end(), tail.begin(), tail.end());
  auto second = SubmitToCore(*core, MakeRequest("second", second_prompt, 4));
  bool first_step = true;
  RunCore(*core, [&](const StepPlan& plan) {
    if (!first_step) return;
    first_step = false;
    ASSERT_EQ(plan.sequences.size(), 1u);
    EXPECT_EQ(plan.sequences[0].num_computed_tokens, 64);
    EXPECT_EQ(plan.sequences[0].num_scheduled_tokens, 10);
  });
  RequestResult result;
  result.Drain(*second);
  ASSERT_TRUE(result.usage.has_value());
  EXPECT_EQ(result.usage->cached_prompt_tokens, 64);
  EXPECT_EQ(result.usage->prompt_tokens, 74);
  // The cached tokens were never recomputed: the same request on a fresh core gives the same
  // tokens (the fake model reads every position back from the KV slots).
  auto fresh = RunAll(options, {MakeRequest("second", second_prompt, 4)});
  EXPECT_EQ(result.choices[0].tokens, fresh["second"].choices[0].tokens);
  EXPECT_EQ(core->Stats().prefix_hit_tokens, 64);
  ExpectAllBlocksFree(*core);
}

TEST(SchedulerTest, ParallelSamplingForksThePromptBlocks) {
  std::mt19937 rng(5);
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 64;
  options.max_num_batched_tokens = 128;
  std::unique_ptr<EngineCore> core = MakeCore(options);
  EngineRequest request = MakeRequest("n3", RandomPrompt(rng, 40), 10, 1.0f, 77);
  request.n = 3;
  auto stream = SubmitToCore(*core, request);
  std::vector<StepPlan> plans;
  RunCore(*core, [&](const StepPlan& plan) { plans.push_back(plan); });
  // Step 1 prefills the prompt's two full blocks once; step 2 starts the three choices from them.
  ASSERT_GE(plans.size(), 2u);
  ASSERT_EQ(plans[0].sequences.size(), 1u);
  EXPECT_EQ(plans[0].sequences[0].num_scheduled_tokens, 32);
  EXPECT_FALSE(plans[0].sequences[0].sample);
  ASSERT_EQ(plans[1].sequences.size(), 3u);
  for (const ScheduledSequence& seq : plans[1].sequences) {
    EXPECT_TRUE(seq.is_new);
    EXPECT_EQ(seq.num_computed_tokens, 32);
    EXPECT_EQ(seq.num_scheduled_tokens, 8);
    EXPECT_EQ(seq.block_ids[0], plans[1].sequences[0].block_ids[0]);  // shared full block
  }
  RequestResult result;
  result.Drain(*stream);
  ASSERT_EQ(result.choices.size(), 3u);
  EXPECT_NE(result.choices[0].tokens, result.choices[1].tokens);
  ASSERT_TRUE(result.usage.has_value());
  EXPECT_EQ(result.usage->completion_tokens, 30);
  // Each choice is what that choice alone gives (as after a migration of that choice only).
  for (int32_t c = 0; c < 3; ++c) {
    EngineRequest alone = request;
    alone.choices = {testing::Choice(c)};
    auto single = RunAll(options, {alone});
    EXPECT_EQ(single["n3"].choices[c].tokens, result.choices[c].tokens) << "choice " << c;
  }
  ExpectAllBlocksFree(*core);
}

TEST(SchedulerTest, MigratedChoiceContinuesWithTheSameTokens) {
  std::mt19937 rng(8);
  EngineOptions options;
  options.num_kv_blocks = 64;
  EngineRequest request = MakeRequest("m", RandomPrompt(rng, 23), 20, 0.8f, 4242);
  request.sampling.presence_penalty = 0.5f;
  auto full = RunAll(options, {request});
  const std::vector<int32_t>& want = full["m"].choices[0].tokens;
  ASSERT_EQ(want.size(), 20u);
  EngineRequest resumed = request;
  resumed.choices = {testing::Choice(0, {want.begin(), want.begin() + 7})};
  auto rest = RunAll(options, {resumed});
  EXPECT_EQ(rest["m"].choices[0].tokens, std::vector<int32_t>(want.begin() + 7, want.end()));
  ASSERT_TRUE(rest["m"].usage.has_value());
  EXPECT_EQ(rest["m"].usage->completion_tokens, 13);
}

TEST(SchedulerTest, SequenceThatCannotGrowAloneFinishesWithLength) {
  EngineOptions options;
  options.block_size = 8;
  options.num_kv_blocks = 3;  // 24 tokens in all
  options.max_num_batched_tokens = 64;
  std::unique_ptr<EngineCore> core = MakeCore(options);
  std::vector<int32_t> prompt(10, 1);
  auto stream = SubmitToCore(*core, MakeRequest("grow", prompt, 100));
  RunCore(*core);
  RequestResult result;
  result.Drain(*stream);
  EXPECT_EQ(result.choices[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(result.choices[0].tokens.size(), 15u);  // 24 slots computed, one more sampled
  ExpectAllBlocksFree(*core);
}

}  // namespace
}  // namespace kvserve
