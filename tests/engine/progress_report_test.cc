// Progress reports (EngineRequest::progress_interval): a request that asked for them gets one
// after each step in which it has no output (each chunk of a long prompt's prefill, each step it
// waits in the queue), carrying its computed context tokens, and none once its tokens flow; a
// request that did not ask gets none. While one is live, a slow machine's prefill is paced into
// steps within twice the interval, so that the reports can come in time. Driven step by step
// (EngineCore + FakeModelRunner, whose step-time model makes steps as slow as a real one's).
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "runner/fake_model_runner.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/scheduler_test_util.h"

namespace kvserve {
namespace {

using testing::MakeCore;
using testing::MakeRequest;
using testing::RandomPrompt;
using testing::RequestResult;
using testing::RunCore;
using testing::SubmitToCore;

// One stream's messages as they came: a progress report's computed tokens, or nullopt for a
// message with output.
std::vector<std::optional<int32_t>> Messages(RequestStream& stream) {
  std::vector<std::optional<int32_t>> messages;
  EngineOutput output;
  while (stream.Pop(absl::ZeroDuration(), &output) == RequestStream::PopResult::kOutput) {
    if (output.prefill_computed_tokens.has_value()) {
      EXPECT_TRUE(output.choices.empty()) << "a progress report carries nothing else";
      EXPECT_FALSE(output.usage.has_value()) << "a progress report carries nothing else";
    }
    messages.push_back(output.prefill_computed_tokens);
  }
  return messages;
}

EngineOptions ChunkedOptions() {
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 64;
  options.max_num_seqs = 4;
  // One block a step: what a report interval of a nanosecond paces any prefill to anyway.
  options.max_num_batched_tokens = 16;
  return options;
}

TEST(ProgressReportTest, EachPrefillChunkWithoutOutputIsReportedAndDecodesAreNot) {
  std::mt19937 rng(3);
  std::unique_ptr<EngineCore> core = MakeCore(ChunkedOptions());
  EngineRequest request = MakeRequest("long", RandomPrompt(rng, 100), 3);
  request.progress_interval = absl::Nanoseconds(1);  // as often as allowed: once per step
  auto stream = SubmitToCore(*core, std::move(request));
  int steps = 0;
  RunCore(*core, [&](const StepPlan&) { ++steps; });
  // Six chunks of 16 (reported), 4 + the first token, then two decodes (tokens).
  EXPECT_EQ(steps, 9);
  const std::vector<std::optional<int32_t>> messages = Messages(*stream);
  ASSERT_EQ(messages.size(), 9u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(messages[i], 16 * (i + 1)) << "chunk " << i;
  for (size_t i = 6; i < messages.size(); ++i) {
    EXPECT_FALSE(messages[i].has_value()) << "a report after the first token, message " << i;
  }
}

TEST(ProgressReportTest, AQueuedRequestIsReportedWhileItWaits) {
  std::mt19937 rng(5);
  EngineOptions options = ChunkedOptions();
  options.max_num_seqs = 1;  // the second request waits for the first to finish
  std::unique_ptr<EngineCore> core = MakeCore(options);
  auto first = SubmitToCore(*core, MakeRequest("first", RandomPrompt(rng, 70), 2));
  EngineRequest second = MakeRequest("second", RandomPrompt(rng, 20), 2);
  second.progress_interval = absl::Nanoseconds(1);
  auto stream = SubmitToCore(*core, std::move(second));
  RunCore(*core);
  // "first": four chunks of 16, 6 + token, a decode (6 steps); "second" waits through them,
  // then prefills 16 (reported), 4 + token, and decodes.
  const std::vector<std::optional<int32_t>> messages = Messages(*stream);
  ASSERT_EQ(messages.size(), 9u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(messages[i], 0) << "waiting: nothing computed, step " << i;
  EXPECT_EQ(messages[6], 16);
  EXPECT_FALSE(messages[7].has_value());
  EXPECT_FALSE(messages[8].has_value());
  for (const std::optional<int32_t>& message : Messages(*first)) {
    EXPECT_FALSE(message.has_value()) << "a request that did not ask got a report";
  }
}

TEST(ProgressReportTest, ReportsAreSpacedByTheInterval) {
  std::mt19937 rng(9);
  std::unique_ptr<EngineCore> core = MakeCore(ChunkedOptions());
  EngineRequest request = MakeRequest("long", RandomPrompt(rng, 200), 1);
  request.progress_interval = absl::Hours(1);  // longer than the test: never due
  auto stream = SubmitToCore(*core, std::move(request));
  RunCore(*core);
  for (const std::optional<int32_t>& message : Messages(*stream)) {
    EXPECT_FALSE(message.has_value()) << "a report before the interval passed";
  }
}

// A prompt token costs 0.02 ms plus 0.1 ms per thousand tokens of context it attends to: an
// unpaced 1,024-token chunk takes about 126 ms, the last ones of a 3,000-token prompt over 300 ms.
FakeModelOptions SlowModel() {
  FakeModelOptions model;
  model.max_context_len = 4096;
  model.step_time = {
      .fixed_ms = 0.5, .prefill_token_ms = 0.02, .prefill_attention_ms_per_mtoken = 100};
  return model;
}

std::unique_ptr<EngineCore> SlowCore() {
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 256;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 1024;
  return MakeCore(options, SlowModel());
}

// The prefill steps of one 3,000-token prompt run alone on `core`, as (prompt tokens, the step's
// time by the model).
std::vector<std::pair<int32_t, absl::Duration>> PrefillSteps(absl::Duration progress_interval,
                                                             EngineCore* core, uint32_t seed = 17) {
  const FakeModelOptions model = SlowModel();
  std::mt19937 rng(seed);
  EngineRequest request = MakeRequest("long" + std::to_string(seed), RandomPrompt(rng, 3000), 2);
  request.progress_interval = progress_interval;
  auto stream = SubmitToCore(*core, std::move(request));
  std::vector<std::pair<int32_t, absl::Duration>> steps;
  int64_t context = 0;  // one prompt, no decodes among its prefill chunks
  RunCore(*core, [&](const StepPlan& plan) {
    for (const ScheduledSequence& seq : plan.sequences) {
      if (IsDecode(seq)) continue;
      context += seq.num_scheduled_tokens;
      steps.emplace_back(
          seq.num_scheduled_tokens,
          model.step_time.Of(seq.num_scheduled_tokens, 0, seq.num_scheduled_tokens * context, 0));
    }
  });
  EXPECT_EQ(context, 3000);
  RequestResult result;
  result.Drain(*stream);
  EXPECT_EQ(result.choices[0].tokens.size(), 2u);
  return steps;
}

TEST(ProgressReportTest, ASlowPrefillIsPacedIntoStepsWithinTwiceTheInterval) {
  const absl::Duration interval = absl::Milliseconds(20);
  std::unique_ptr<EngineCore> core = SlowCore();
  const std::vector<std::pair<int32_t, absl::Duration>> steps = PrefillSteps(interval, core.get());
  ASSERT_GT(steps.size(), 10u) << "not paced";
  // The first step has nothing measured yet; from the second on each fits twice the interval
  // (a busy machine only makes the measured steps slower, hence the chunks smaller).
  for (size_t i = 1; i < steps.size(); ++i) {
    EXPECT_LE(steps[i].second, 2 * interval) << "step " << i << ": " << steps[i].first;
    if (i + 1 < steps.size()) {
      EXPECT_GE(steps[i].first, 16) << "at least a block, step " << i;
    }
  }
}

TEST(ProgressReportTest, WithoutProgressReportsPrefillsAreNotPaced) {
  std::unique_ptr<EngineCore> core = SlowCore();
  const std::vector<std::pair<int32_t, absl::Duration>> steps =
      PrefillSteps(absl::ZeroDuration(), core.get());
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].first, 1024);
  EXPECT_EQ(steps[1].first, 1024);
  EXPECT_EQ(steps[2].first, 952);
}

TEST(ProgressReportTest, TheLearntPaceOutlivesTheRequestThatTaughtIt) {
  const absl::Duration interval = absl::Milliseconds(20);
  std::unique_ptr<EngineCore> core = SlowCore();
  PrefillSteps(interval, core.get(), 17);
  PrefillSteps(absl::ZeroDuration(), core.get(), 18);  // unpaced meanwhile: nobody asks
  const std::vector<std::pair<int32_t, absl::Duration>> steps =
      PrefillSteps(interval, core.get(), 19);
  ASSERT_GT(steps.size(), 10u);
  EXPECT_LE(steps[0].second, 2 * interval) << "the next request's first step was not paced";
  EXPECT_LT(steps[0].first, 1024);
}

}  // namespace
}  // namespace kvserve
