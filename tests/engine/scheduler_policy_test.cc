// The default scheduling policy's rules, one test each, driven step by step (EngineCore +
// FakeModelRunner): the automatic step-time target bounds every step that decodes; a queue that
// outnumbers the decodes lifts the caps; the queue-wait rule bounds a request's wait behind them;
// requests that arrive together with a shared prefix compute it once and join it.
#include <algorithm>
#include <cstdint>
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

using testing::CountStep;
using testing::ExpectAllBlocksFree;
using testing::ExpectAllComplete;
using testing::MakeCore;
using testing::MakeRequest;
using testing::RandomPrompt;
using testing::RequestResult;
using testing::RunAll;
using testing::RunCore;
using testing::StepCounts;
using testing::SubmitToCore;

bool PlanStarts(const StepPlan& plan, size_t num_new) {
  return static_cast<size_t>(std::count_if(plan.sequences.begin(), plan.sequences.end(),
                                           [](const ScheduledSequence& s) { return s.is_new; })) ==
         num_new;
}

// Default options (the automatic target): simulated steps of 40 ms + 1 ms per decode + 0.5 ms
// per prompt token. Eight decodes take 48 ms alone, so the target is 1.5 x 48 = 72 ms and a
// step that decodes may add (72 - 48) / 0.5 = 48 prompt tokens; prompts arriving one by one
// (never outnumbering the decodes) get that and no more.
TEST(SchedulerPolicyTest, AutomaticTargetBoundsEveryStepThatDecodes) {
  FakeModelOptions model;
  model.step_time = {.fixed_ms = 40, .prefill_token_ms = 0.5, .decode_token_ms = 1};
  EngineOptions options;
  options.num_kv_blocks = 256;
  options.max_num_seqs = 16;
  options.max_num_batched_tokens = 512;
  options.max_queue_wait_ms = 0;  // this test is about the target alone
  ASSERT_EQ(options.step_time_target_ms, kAutoStepTimeTarget)
      << "the automatic target is the default";
  std::unique_ptr<EngineCore> core = MakeCore(options, model);
  std::mt19937 rng(21);
  std::vector<std::shared_ptr<RequestStream>> decoding, prompts;
  for (int i = 0; i < 8; ++i) {
    decoding.push_back(
        SubmitToCore(*core, MakeRequest("d" + std::to_string(i), RandomPrompt(rng, 8), 40)));
  }
  std::vector<int32_t> mixed;  // prompt tokens of steps that also decode
  int step = 0;
  RunCore(*core, [&](const StepPlan& plan) {
    const StepCounts counts = CountStep(plan);
    if (counts.decodes > 0 && counts.prompt_tokens > 0) mixed.push_back(counts.prompt_tokens);
    // One 200-token prompt every third step from step 4 on, after decode-only steps taught
    // the estimator the decode line.
    if (++step >= 4 && step % 3 == 1 && prompts.size() < 4) {
      prompts.push_back(
          SubmitToCore(*core, MakeRequest("p" + std::to_string(step), RandomPrompt(rng, 200), 2)));
    }
  });
  // The first mixed step runs uncapped (a prompt token's cost is not known yet) and teaches it.
  ASSERT_GE(mixed.size(), 4u);
  EXPECT_GT(mixed.front(), 64);
  for (size_t i = 1; i < mixed.size(); ++i) {
    // 48 by the model; a busy machine's slower steps raise the target, hence the margin (an
    // uncapped step takes a whole prompt, 200). A prompt's last chunk may be under a block.
    EXPECT_LE(mixed[i], 96) << "mixed step " << i;
    EXPECT_GE(mixed[i], 1) << "mixed step " << i;
  }
  ExpectAllComplete(decoding, 40);
  ExpectAllComplete(prompts, 2);
  ExpectAllBlocksFree(*core);
}

// A burst that outnumbers the running decodes is admitted in one step, past the cap: holding it
// back would delay more requests than the one long step delays streams.
TEST(SchedulerPolicyTest, QueueThatOutnumbersTheDecodesLiftsTheCap) {
  EngineOptions options;
  options.num_kv_blocks = 128;
  options.max_num_seqs = 16;
  options.max_num_batched_tokens = 256;
  options.max_prefill_tokens_per_step = 16;
  options.step_time_target_ms = 0;
  options.max_queue_wait_ms = 0;
  std::unique_ptr<EngineCore> core = MakeCore(options);
  std::mt19937 rng(22);
  std::vector<std::shared_ptr<RequestStream>> first, burst, late;
  for (int i = 0; i < 2; ++i) {
    first.push_back(
        SubmitToCore(*core, MakeRequest("a" + std::to_string(i), RandomPrompt(rng, 8), 30)));
  }
  std::vector<StepCounts> steps;
  RunCore(*core, [&](const StepPlan& plan) {
    steps.push_back(CountStep(plan));
    if (steps.size() == 2) {  // two decode; five arrive
      for (int i = 0; i < 5; ++i) {
        burst.push_back(
            SubmitToCore(*core, MakeRequest("b" + std::to_string(i), RandomPrompt(rng, 40), 4)));
      }
    }
    if (steps.size() == 6) {  // the burst is done; two arrive beside two decodes: capped
      for (int i = 0; i < 2; ++i) {
        late.push_back(
            SubmitToCore(*core, MakeRequest("c" + std::to_string(i), RandomPrompt(rng, 40), 4)));
      }
    }
  });
  ASSERT_GE(steps.size(), 8u);
  EXPECT_EQ(steps[2].decodes, 2);
  EXPECT_EQ(steps[2].prompt_tokens, 5 * 40) << "the whole burst in one step";
  EXPECT_GE(steps[6].decodes, 2);
  EXPECT_LE(steps[6].prompt_tokens, 16) << "two waiting behind more decodes: capped";
  ExpectAllComplete(first, 30);
  ExpectAllComplete(burst, 4);
  ExpectAllComplete(late, 4);
  ExpectAllBlocksFree(*core);
}

// Behind the cap a queue drains a block a step; a request that has waited max_queue_wait_ms gets
// a step past the cap. Simulated steps take at least 10 ms, so with a 25 ms bound no request
// waits more than 4 steps (without the rule the last one waits about 10).
TEST(SchedulerPolicyTest, QueueWaitIsBounded) {
  FakeModelOptions model;
  model.step_time = {.fixed_ms = 10};
  EngineOptions options;
  options.num_kv_blocks = 256;
  options.max_num_seqs = 16;
  options.max_num_batched_tokens = 256;
  options.max_prefill_tokens_per_step = 16;
  options.step_time_target_ms = 0;
  options.max_queue_wait_ms = 25;
  std::unique_ptr<EngineCore> core = MakeCore(options, model);
  std::mt19937 rng(23);
  std::vector<std::shared_ptr<RequestStream>> decoding, queued;
  for (int i = 0; i < 6; ++i) {
    decoding.push_back(
        SubmitToCore(*core, MakeRequest("d" + std::to_string(i), RandomPrompt(rng, 8), 40)));
  }
  std::map<std::string, int> arrived, started;
  int step = 0;
  bool lifted = false;
  RunCore(*core, [&](const StepPlan& plan) {
    ++step;
    const StepCounts counts = CountStep(plan);
    if (counts.decodes > 0 && counts.prompt_tokens > 16) lifted = true;
    for (const ScheduledSequence& seq : plan.sequences) {
      // Sequence ids follow submission order: d0..d5 are 1..6, q0..q4 are 7..11.
      if (seq.is_new && seq.id >= 7) started.emplace("q" + std::to_string(seq.id - 7), step);
    }
    if (step == 3) {  // six decode; five 48-token prompts queue behind a 16-token cap
      for (int i = 0; i < 5; ++i) {
        const std::string id = "q" + std::to_string(i);
        queued.push_back(SubmitToCore(*core, MakeRequest(id, RandomPrompt(rng, 48), 2)));
        arrived[id] = step;
      }
    }
  });
  EXPECT_TRUE(lifted) << "no step went past the cap";
  ASSERT_EQ(started.size(), 5u);
  for (const auto& [id, at] : started) {
    EXPECT_LE(at - arrived[id], 4) << id << " waited " << at - arrived[id] << " steps";
  }
  ExpectAllComplete(decoding, 40);
  ExpectAllComplete(queued, 2);
  ExpectAllBlocksFree(*core);
}

// Four requests with one 64-token prefix and their own 8-token ends arrive together: the first
// computes the prefix, the other three wait one step and attach it from the prefix cache (and a
// request that shares nothing is not held up by them). Output as each alone.
TEST(SchedulerPolicyTest, SharedPrefixArrivingTogetherIsComputedOnce) {
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 128;
  options.max_num_seqs = 16;
  options.max_num_batched_tokens = 512;
  std::mt19937 rng(24);
  const std::vector<int32_t> prefix = RandomPrompt(rng, 64);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> prompt = prefix;
    const std::vector<int32_t> end = RandomPrompt(rng, 8);
    prompt.insert(prompt.end(), end.begin(), end.end());
    requests.push_back(MakeRequest("s" + std::to_string(i), prompt, 6));
  }
  requests.push_back(MakeRequest("other", RandomPrompt(rng, 72), 6));
  std::unique_ptr<EngineCore> core = MakeCore(options);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& request : requests) {
    streams[request.request_id] = SubmitToCore(*core, request);
  }
  std::vector<StepPlan> plans;
  int32_t prompt_tokens = 0;
  RunCore(*core, [&](const StepPlan& plan) {
    plans.push_back(plan);
    prompt_tokens += CountStep(plan).prompt_tokens;
  });
  ASSERT_GE(plans.size(), 2u);
  EXPECT_TRUE(PlanStarts(plans[0], 2)) << "the first sharer and the other";
  EXPECT_TRUE(PlanStarts(plans[1], 3)) << "the other sharers, the step after";
  EXPECT_EQ(prompt_tokens, 72 + 3 * 8 + 72) << "the prefix computed once";
  for (const EngineRequest& request : requests) {
    RequestResult together;
    together.Drain(*streams[request.request_id]);
    std::map<std::string, RequestResult> alone = RunAll(options, {request});
    KVSERVE_EXPECT_OK(together.status);
    EXPECT_EQ(together.choices[0].tokens, alone[request.request_id].choices[0].tokens)
        << request.request_id;
  }
  ExpectAllBlocksFree(*core);
}

}  // namespace
}  // namespace kvserve
