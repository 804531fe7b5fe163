// The scheduler tests' set-up (scheduler_test.cc, scheduler_host_tier_test.cc): an engine core
// over the fake runner, random prompts, the check that every block came back, and a run of
// requests to their ends (header-only; a test that includes it links kvserve_runner and gtest).
#ifndef KVSERVE_TESTS_ENGINE_SCHEDULER_TEST_UTIL_H_
#define KVSERVE_TESTS_ENGINE_SCHEDULER_TEST_UTIL_H_

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
#include "tests/status_matchers.h"

namespace kvserve::testing {

inline std::unique_ptr<EngineCore> MakeCore(const EngineOptions& options,
                                            const FakeModelOptions& model = {}) {
  absl::StatusOr<std::unique_ptr<EngineCore>> core = EngineCore::Create(
      options, std::make_unique<FakeModelRunner>(model), /*tokenizer=*/nullptr, nullptr);
  KVSERVE_EXPECT_OK(core);
  return core.ok() ? *std::move(core) : nullptr;
}

inline std::vector<int32_t> RandomPrompt(std::mt19937& rng, int length) {
  std::uniform_int_distribution<int32_t> token(0, 255);
  std::vector<int32_t> prompt(length);
  for (int32_t& t : prompt) t = token(rng);
  return prompt;
}

inline void ExpectAllBlocksFree(const EngineCore& core) {
  const KvCacheStats stats = core.manager().Stats();
  EXPECT_EQ(stats.free_blocks, stats.total_blocks);
  EXPECT_EQ(stats.used_blocks, 0);
  EXPECT_EQ(stats.num_sequences, 0);
  KVSERVE_EXPECT_OK(core.manager().CheckInvariants());
}

// A plan's decodes and prompt (prefill) tokens.
struct StepCounts {
  int32_t decodes = 0;
  int32_t prompt_tokens = 0;
};

inline StepCounts CountStep(const StepPlan& plan) {
  StepCounts counts;
  for (const ScheduledSequence& seq : plan.sequences) {
    if (IsDecode(seq)) {
      ++counts.decodes;
    } else {
      counts.prompt_tokens += seq.num_scheduled_tokens;
    }
  }
  return counts;
}

// Each stream ended OK with one choice of `num_tokens` tokens.
inline void ExpectAllComplete(std::vector<std::shared_ptr<RequestStream>>& streams,
                              size_t num_tokens) {
  for (auto& stream : streams) {
    RequestResult result;
    result.Drain(*stream);
    KVSERVE_EXPECT_OK(result.status);
    ASSERT_EQ(result.choices.size(), 1u);
    EXPECT_EQ(result.choices[0].tokens.size(), num_tokens);
  }
}

// Runs `requests` on a fresh core; returns their results by id.
inline std::map<std::string, RequestResult> RunAll(const EngineOptions& options,
                                                   const std::vector<EngineRequest>& requests,
                                                   int64_t* preemptions = nullptr) {
  std::unique_ptr<EngineCore> core = MakeCore(options);
  std::map<std::string, std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& request : requests) {
    streams[request.request_id] = SubmitToCore(*core, request);
  }
  RunCore(*core);
  std::map<std::string, RequestResult> results;
  for (auto& [id, stream] : streams) results[id].Drain(*stream);
  if (preemptions != nullptr) *preemptions = core->Stats().num_preemptions;
  ExpectAllBlocksFree(*core);
  return results;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_ENGINE_SCHEDULER_TEST_UTIL_H_
