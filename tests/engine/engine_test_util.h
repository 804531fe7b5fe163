// Helpers shared by the worker engine tests: a 128-token ASCII tokenizer for the fake runner
// (token id = byte), a collector that drains a RequestStream into per-choice results, and a
// driver that runs an EngineCore step by step, checking the KV invariants after every step.
#ifndef KVSERVE_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
#define KVSERVE_TESTS_ENGINE_ENGINE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine_core.h"
#include "engine/request_stream.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::testing {

// Byte-level BPE tokenizer whose vocabulary is the 128 ASCII bytes (plus one merge): token id
// b < 128 decodes to byte b, so any such token sequence is valid UTF-8 text.
inline std::unique_ptr<Tokenizer> MakeAsciiTokenizer() {
  TokenizerSpec spec;
  spec.type = TokenizerType::kByteLevelBpe;
  for (int b = 0; b < 128; ++b) {
    // GPT-2's byte alphabet: printable bytes spell themselves, the others U+0100 upwards.
    int code_point = b;
    if (b <= 32) code_point = 256 + b;
    if (b == 127) code_point = 256 + 33;
    std::string piece;
    if (code_point < 0x80) {
      piece.push_back(static_cast<char>(code_point));
    } else {
      piece.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
      piece.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
    }
    spec.pieces.push_back(piece);
  }
  // The format wants at least one merge: "ab" (id 128), which the tests never sample.
  spec.pieces.push_back("ab");
  spec.merges.emplace_back("a", "b");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromSpec(std::move(spec));
  KVSERVE_EXPECT_OK(tokenizer);
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

// Everything one choice produced, concatenated over its deltas.
struct ChoiceResult {
  std::vector<int32_t> tokens;
  std::string text;
  std::vector<PositionLogprobsOutput> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<std::string> stop_string;
  std::optional<int32_t> stop_token_id;
  int num_final_deltas = 0;  // deltas with a finish reason: must end up 1
};

struct RequestResult {
  std::map<int32_t, ChoiceResult> choices;
  std::optional<std::vector<PositionLogprobsOutput>> prompt_logprobs;
  std::optional<Usage> usage;
  int num_messages = 0;
  int num_usage_messages = 0;
  bool ended = false;
  absl::Status status;

  // Adds one message, checking the stream's rules as it goes.
  void Add(const EngineOutput& output) {
    ++num_messages;
    EXPECT_FALSE(usage.has_value()) << "a message after the one with usage";
    if (output.prompt_logprobs.has_value()) {
      EXPECT_FALSE(prompt_logprobs.has_value()) << "prompt logprobs sent twice";
      for (const auto& [index, choice] : choices) {
        EXPECT_TRUE(choice.tokens.empty())
            << "prompt logprobs after choice " << index << "'s token";
      }
      prompt_logprobs = output.prompt_logprobs;
    }
    for (const ChoiceOutput& delta : output.choices) {
      ChoiceResult& choice = choices[delta.index];
      EXPECT_EQ(choice.finish_reason, FinishReason::kNone) << "a delta after the final one";
      choice.tokens.insert(choice.tokens.end(), delta.token_ids.begin(), delta.token_ids.end());
      choice.text += delta.text;
      choice.logprobs.insert(choice.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
      if (delta.finish_reason != FinishReason::kNone) {
        choice.finish_reason = delta.finish_reason;
        choice.stop_string = delta.stop_string;
        choice.stop_token_id = delta.stop_token_id;
        ++choice.num_final_deltas;
      }
    }
    if (output.usage.has_value()) {
      usage = output.usage;
      ++num_usage_messages;
    }
  }

  // Pops whatever the stream holds now (no waiting); records the end.
  void Drain(RequestStream& stream) {
    EngineOutput output;
    while (true) {
      RequestStream::PopResult result = stream.Pop(absl::ZeroDuration(), &output);
      if (result == RequestStream::PopResult::kOutput) {
        Add(output);
        continue;
      }
      if (result == RequestStream::PopResult::kEnd) {
        ended = true;
        status = stream.final_status();
      }
      return;
    }
  }

  // Pops until the stream ends (or the timeout passes: a test failure).
  void DrainUntilEnd(RequestStream& stream, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    EngineOutput output;
    while (absl::Now() < deadline) {
      RequestStream::PopResult result = stream.Pop(deadline - absl::Now(), &output);
      if (result == RequestStream::PopResult::kOutput) {
        Add(output);
      } else if (result == RequestStream::PopResult::kEnd) {
        ended = true;
        status = stream.final_status();
        return;
      }
    }
    ADD_FAILURE() << "stream " << stream.request_id() << " did not end in " << timeout;
  }

  // Every logprob received (each position's chosen one, then its top-n), choices in index
  // order: to compare two runs bit for bit.
  std::vector<float> AllLogprobs() const {
    std::vector<float> all;
    for (const auto& [index, choice] : choices) {
      for (const PositionLogprobsOutput& position : choice.logprobs) {
        all.push_back(position.chosen.logprob);
        for (const TokenLogprobOutput& top : position.top) all.push_back(top.logprob);
      }
    }
    return all;
  }
};

// Submits to an EngineCore on the test's thread (what Engine::Submit does across threads).
inline std::shared_ptr<RequestStream> SubmitToCore(EngineCore& core, EngineRequest request) {
  absl::Status valid = core.ValidateRequest(request);
  KVSERVE_EXPECT_OK(valid);
  if (!valid.ok()) return nullptr;
  auto stream = std::make_shared<RequestStream>(request.request_id);
  absl::Status added = core.AddRequest(core.MakeRequest(std::move(request), stream, absl::Now()));
  KVSERVE_EXPECT_OK(added);
  return stream;
}

// Steps `core` until it has no work, calling on_step after each step; fails the test on a step
// error, on broken KV invariants, or when it takes more than max_steps.
inline void RunCore(EngineCore& core, const std::function<void(const StepPlan&)>& on_step = {},
                    int max_steps = 100000) {
  int steps = 0;
  while (core.has_work()) {
    ASSERT_LT(steps++, max_steps) << "engine did not finish";
    absl::Status status = core.Step();
    KVSERVE_ASSERT_OK(status);
    absl::Status invariants = core.manager().CheckInvariants();
    KVSERVE_ASSERT_OK(invariants);
    if (on_step) on_step(core.last_plan());
  }
}

inline ChoiceStart Choice(int32_t index, std::vector<int32_t> generated = {},
                          int64_t emitted_text_bytes = 0) {
  ChoiceStart start;
  start.index = index;
  start.generated_token_ids = std::move(generated);
  start.emitted_text_bytes = emitted_text_bytes;
  return start;
}

inline EngineRequest MakeRequest(std::string id, std::vector<int32_t> prompt, int32_t max_tokens,
                                 float temperature = 0.0f, uint64_t seed = 0) {
  EngineRequest request;
  request.request_id = std::move(id);
  request.prompt_token_ids = std::move(prompt);
  request.sampling.max_tokens = max_tokens;
  request.sampling.temperature = temperature;
  request.sampling.seed = seed;
  return request;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_ENGINE_ENGINE_TEST_UTIL_H_
