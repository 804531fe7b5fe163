// Progress reports (EngineRequest::progress_interval): a request that asked for them gets one
// after each step in which it has no output (each chunk of a long prompt's prefill, each step it
// waits in the queue), carrying its computed context tokens, and none once its tokens flow; a
// request that did not ask gets none. Driven step by step (EngineCore + FakeModelRunner).
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"
#include "tests/engine/scheduler_test_util.h"

namespace kvserve {
namespace {

using testing::MakeCore;
using testing::MakeRequest;
using testing::RandomPrompt;
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
  options.max_num_batched_tokens = 32;
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
  // Chunks 32, 32, 32 (reported), 4 + the first token, then two decodes (tokens).
  EXPECT_EQ(steps, 6);
  const std::vector<std::optional<int32_t>> messages = Messages(*stream);
  ASSERT_EQ(messages.size(), 6u);
  EXPECT_EQ(messages[0], 32);
  EXPECT_EQ(messages[1], 64);
  EXPECT_EQ(messages[2], 96);
  for (size_t i = 3; i < messages.size(); ++i) {
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
  // "first": chunks 32, 32, 6 + token, a decode (4 steps); "second" waits through them, then
  // prefills 20 + token and decodes.
  const std::vector<std::optional<int32_t>> messages = Messages(*stream);
  ASSERT_EQ(messages.size(), 6u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(messages[i], 0) << "waiting: nothing computed, step " << i;
  EXPECT_FALSE(messages[4].has_value());
  EXPECT_FALSE(messages[5].has_value());
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

}  // namespace
}  // namespace kvserve
