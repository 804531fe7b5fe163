// The engine with the REAL default model (SmolLM2-135M, model/default_model.h) on the CPU:
// batching must not change greedy or seeded outputs, stop strings never leak, n > 1 forks,
// migration continues a choice exactly, and abort frees the blocks. Outputs are kept short
// (16-32 tokens): the CPU forward of a 135M model is the cost here.
#include "engine/engine.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/default_model.h"
#include "model/gguf_file.h"
#include "model/weights_loader.h"
#include "runner/llama_model_runner.h"
#include "tests/engine/engine_test_util.h"
#include "tests/status_matchers.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using testing::Choice;
using testing::MakeRequest;
using testing::RequestResult;

constexpr absl::Duration kTimeout = absl::Minutes(5);

struct LoadedModel {
  std::shared_ptr<const DeviceWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

LoadedModel* model = nullptr;

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string path = DefaultModelPath();
    if (!std::filesystem::exists(path)) return;
    auto weights = LoadWeights(path);
    KVSERVE_ASSERT_OK(weights);
    auto gguf = GgufFile::Open(path);
    KVSERVE_ASSERT_OK(gguf);
    auto tokenizer = Tokenizer::FromGguf(**gguf);
    KVSERVE_ASSERT_OK(tokenizer);
    auto uploaded = DeviceWeights::Upload(*weights, std::make_shared<kernels::cpu::CpuBackend>(),
                                          kernels::DType::kF32);
    KVSERVE_ASSERT_OK(uploaded);
    model = new LoadedModel{std::shared_ptr<const DeviceWeights>(*std::move(uploaded)),
                            *std::move(tokenizer)};
  }

  void SetUp() override {
    ASSERT_NE(model, nullptr) << "the default model " << DefaultModelPath()
                              << " is missing: run scripts/setup.sh (or set KVSERVE_MODEL)";
  }

  static EngineOptions Options() {
    EngineOptions options;
    options.block_size = 16;
    options.num_kv_blocks = 256;
    options.max_num_seqs = 16;
    options.max_num_batched_tokens = 256;
    return options;
  }

  static std::unique_ptr<Engine> MakeEngine(const EngineOptions& options = Options()) {
    auto runner = LlamaModelRunner::Create(model->weights, {});
    KVSERVE_EXPECT_OK(runner);
    auto engine = Engine::Create(options, *std::move(runner), model->tokenizer.get(), nullptr);
    KVSERVE_EXPECT_OK(engine);
    KVSERVE_EXPECT_OK((*engine)->Start());
    return *std::move(engine);
  }

  static std::vector<int32_t> Encode(const std::string& text) {
    return model->tokenizer->Encode(text, /*add_bos=*/false);
  }

  // Submits every request at once and waits for all of them.
  static std::map<std::string, RequestResult> RunTogether(
      Engine& engine, const std::vector<EngineRequest>& requests) {
    std::map<std::string, std::shared_ptr<RequestStream>> streams;
    for (const EngineRequest& request : requests) {
      auto stream = engine.Submit(request);
      KVSERVE_EXPECT_OK(stream);
      if (stream.ok()) streams[request.request_id] = *stream;
    }
    std::map<std::string, RequestResult> results;
    for (auto& [id, stream] : streams) results[id].DrainUntilEnd(*stream, kTimeout);
    return results;
  }

  // Runs each request with nothing else in the engine.
  static std::map<std::string, RequestResult> RunAlone(Engine& engine,
                                                       const std::vector<EngineRequest>& requests) {
    std::map<std::string, RequestResult> results;
    for (const EngineRequest& request : requests) {
      results.merge(RunTogether(engine, {request}));
    }
    return results;
  }

  static void ExpectPoolFree(Engine& engine) {
    ASSERT_TRUE(engine.WaitIdle(kTimeout));
    const absl::Time deadline = absl::Now() + kTimeout;
    while (engine.Stats().used_blocks != 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    const EngineStats stats = engine.Stats();
    EXPECT_EQ(stats.used_blocks, 0);
    EXPECT_EQ(stats.free_blocks, stats.total_blocks);
  }
};

const char* const kTexts[] = {
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "def fibonacci(n):",
    "List three colours:",
    "The quick brown fox",
    "In 1969, astronauts",
    "Water boils at a temperature of",
    "My favourite programming language is C++ because it gives me control over memory, "
    "performance and abstractions; the reason I like it most is",
    "Hello",
    "The theory of relativity, proposed by Albert Einstein,",
    "To make a cup of tea, first",
    "Q: What is 2 + 2?\nA:",
    "The three laws of robotics are",
    "Paris, London, Berlin,",
    "A haiku about autumn:\n",
    "The most important thing about a paged KV cache is that",
};

TEST_F(EngineTest, SixteenConcurrentGreedyRequestsGiveWhatEachGivesAlone) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 16; ++i) {
    requests.push_back(MakeRequest("g" + std::to_string(i), Encode(kTexts[i]), 16 + i % 3));
  }
  auto alone_engine = MakeEngine();
  auto alone = RunAlone(*alone_engine, requests);
  auto engine = MakeEngine();
  auto together = RunTogether(*engine, requests);
  for (const EngineRequest& request : requests) {
    const RequestResult& want = alone[request.request_id];
    const RequestResult& got = together[request.request_id];
    KVSERVE_ASSERT_OK(got.status);
    EXPECT_FALSE(want.choices.at(0).tokens.empty());
    EXPECT_EQ(got.choices.at(0).tokens, want.choices.at(0).tokens) << request.request_id;
    EXPECT_EQ(got.choices.at(0).text, want.choices.at(0).text) << request.request_id;
    // The streamed text is the detokenized output (no EOS text: skipped as special).
    EXPECT_EQ(got.choices.at(0).text,
              model->tokenizer->Decode(got.choices.at(0).tokens, /*skip_special=*/true));
    ASSERT_TRUE(got.usage.has_value());
    EXPECT_EQ(got.usage->prompt_tokens, static_cast<int>(request.prompt_token_ids.size()));
  }
  ExpectPoolFree(*engine);
}

TEST_F(EngineTest, SeededSamplingGivesTheSameTokensAloneOrBatched) {
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 6; ++i) {
    EngineRequest request =
        MakeRequest("s" + std::to_string(i), Encode(kTexts[i * 2 + 1]), 16, 0.9f, 1234 + i);
    request.sampling.top_p = 0.95f;
    request.sampling.ignore_eos = true;
    request.sampling.logprobs = 2;
    requests.push_back(std::move(request));
  }
  auto engine = MakeEngine();
  auto alone = RunAlone(*engine, requests);
  auto together = RunTogether(*engine, requests);
  for (const EngineRequest& request : requests) {
    const auto& want = alone[request.request_id].choices.at(0);
    const auto& got = together[request.request_id].choices.at(0);
    EXPECT_EQ(got.tokens.size(), 16u);
    EXPECT_EQ(got.tokens, want.tokens) << request.request_id;
    ASSERT_EQ(got.logprobs.size(), got.tokens.size());
    for (size_t i = 0; i < got.tokens.size(); ++i) {
      EXPECT_EQ(got.logprobs[i].chosen.token_id, got.tokens[i]);
      EXPECT_LE(got.logprobs[i].chosen.logprob, 0.0f);
      EXPECT_GE(got.logprobs[i].chosen.rank, 1);
      ASSERT_EQ(got.logprobs[i].top.size(), 2u);
      EXPECT_GE(got.logprobs[i].top[0].logprob, got.logprobs[i].top[1].logprob);
    }
  }
  ExpectPoolFree(*engine);
}

TEST_F(EngineTest, StopStringEndsTheChoiceAndNeverLeaks) {
  auto engine = MakeEngine();
  EngineRequest request =
      MakeRequest("stop", Encode("Count from one to twenty: one, two, three,"), 32);
  request.sampling.ignore_eos = true;
  auto base = RunTogether(*engine, {request});
  const std::string full = base["stop"].choices.at(0).text;
  ASSERT_GT(full.size(), 12u) << full;
  // A stop string from the middle of the output, cut over token boundaries on purpose.
  const std::string stop = full.substr(full.size() / 2, 4);
  const size_t first = full.find(stop);
  for (bool include : {false, true}) {
    EngineRequest with_stop = request;
    with_stop.request_id = include ? "stop-include" : "stop-exclude";
    with_stop.sampling.stop = {"never-appears-here", stop};
    with_stop.sampling.include_stop_str_in_output = include;
    auto result = RunTogether(*engine, {with_stop});
    const auto& choice = result[with_stop.request_id].choices.at(0);
    EXPECT_EQ(choice.finish_reason, FinishReason::kStopString);
    EXPECT_EQ(choice.stop_string, stop);
    EXPECT_EQ(choice.text, full.substr(0, include ? first + stop.size() : first))
        << "stop '" << stop << "' in '" << full << "'";
    const auto& base_tokens = base["stop"].choices.at(0).tokens;
    ASSERT_LE(choice.tokens.size(), base_tokens.size());
    EXPECT_TRUE(std::equal(choice.tokens.begin(), choice.tokens.end(), base_tokens.begin()));
    EXPECT_LT(choice.tokens.size(), base_tokens.size());
  }
  ExpectPoolFree(*engine);
}

TEST_F(EngineTest, ParallelSamplingChoicesMatchTheirSingleChoiceRuns) {
  auto engine = MakeEngine();
  EngineRequest request = MakeRequest(
      "n",
      Encode("Write one short sentence about the ocean, the sky, the rivers, the forests and "
             "the mountains at dawn:"),
      16, 1.0f, 99);
  request.n = 3;
  request.sampling.ignore_eos = true;
  ASSERT_GT(request.prompt_token_ids.size(), 16u);  // at least one full block is forked
  auto together = RunTogether(*engine, {request});
  const RequestResult& result = together["n"];
  ASSERT_EQ(result.choices.size(), 3u);
  ASSERT_TRUE(result.usage.has_value());
  EXPECT_EQ(result.usage->completion_tokens, 48);
  EXPECT_NE(result.choices.at(0).tokens, result.choices.at(1).tokens);
  for (int32_t c = 0; c < 3; ++c) {
    EngineRequest single = request;
    single.choices = {Choice(c)};
    auto alone = RunTogether(*engine, {single});
    EXPECT_EQ(alone["n"].choices.at(c).tokens, result.choices.at(c).tokens) << "choice " << c;
  }
  ExpectPoolFree(*engine);
}

TEST_F(EngineTest, MigratedChoiceContinuesTokensAndText) {
  auto engine = MakeEngine();
  EngineRequest request =
      MakeRequest("mig", Encode("The history of the printing press"), 24, 0.7f, 2024);
  request.sampling.ignore_eos = true;
  // Record what the client had after each message.
  auto stream = engine->Submit(request);
  KVSERVE_ASSERT_OK(stream);
  std::vector<std::pair<size_t, size_t>> boundaries;  // (tokens, text bytes) after a message
  RequestResult full;
  EngineOutput output;
  while ((*stream)->Pop(kTimeout, &output) == RequestStream::PopResult::kOutput) {
    full.Add(output);
    boundaries.emplace_back(full.choices[0].tokens.size(), full.choices[0].text.size());
  }
  const auto& want = full.choices.at(0);
  ASSERT_EQ(want.tokens.size(), 24u);
  const auto [num_tokens, num_bytes] = boundaries[boundaries.size() / 2];
  EngineRequest resumed = request;
  resumed.choices = {Choice(0, {want.tokens.begin(), want.tokens.begin() + num_tokens},
                            static_cast<int64_t>(num_bytes))};
  auto rest = RunTogether(*engine, {resumed});
  const auto& got = rest["mig"].choices.at(0);
  EXPECT_EQ(got.tokens, std::vector<int32_t>(want.tokens.begin() + num_tokens, want.tokens.end()));
  EXPECT_EQ(got.text, want.text.substr(num_bytes));
  ExpectPoolFree(*engine);
}

TEST_F(EngineTest, AbortMidGenerationFreesTheBlocks) {
  auto engine = MakeEngine();
  EngineRequest request = MakeRequest("abort", Encode(kTexts[1]), 500);
  request.sampling.ignore_eos = true;
  auto stream = engine->Submit(request);
  KVSERVE_ASSERT_OK(stream);
  EngineOutput output;
  ASSERT_EQ((*stream)->Pop(kTimeout, &output), RequestStream::PopResult::kOutput);
  KVSERVE_ASSERT_OK(engine->Abort("abort"));
  RequestResult result;
  result.DrainUntilEnd(**stream, kTimeout);
  EXPECT_THAT(result.status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_LT(result.choices[0].tokens.size() + output.choices[0].token_ids.size(), 500u);
  ExpectPoolFree(*engine);
}

}  // namespace
}  // namespace kvserve
