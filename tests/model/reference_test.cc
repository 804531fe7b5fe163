// Our C++ forward on the real default model against an independent float64 numpy implementation
// (tests/model/reference_logits.py, full recompute, no cache; its fixtures are committed in
// tests/model/fixtures/reference_*.json, prompts stored as token ids).
//
// Error measure, per checked position: max |ours - reference| / max |reference| over the stored
// entries (the top-20 logits of the reference and 256 fixed sampled vocabulary ids), <= 1e-3.
// Greedy: the 32 tokens our cached decode picks by argmax equal the reference's exactly (the
// fixture records the top-1/top-2 margin of every step; the smallest is 0.026, far above fp32
// error, so a tie cannot flip a token legitimately).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/offline_generate.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/quant_linear.h"
#include "model/default_model.h"
#include "model/device_weights.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"
#include "model/weights_loader.h"
#include "nlohmann/json.hpp"
#include "runner/llama_model_runner.h"
#include "tests/model/llama_model_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

constexpr double kMaxRelativeError = 1e-3;
constexpr int32_t kBlockSize = 16;

class ReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    const std::string path = DefaultModelPath();
    if (!std::filesystem::exists(path)) return;
    auto loaded = LoadWeights(path);
    KVSERVE_ASSERT_OK(loaded);
    weights_ = new ModelWeights(std::move(loaded).value());
    device_weights_ = testing::UploadToCpu(*weights_, 2).release();
  }
  static void TearDownTestSuite() {
    delete device_weights_;
    device_weights_ = nullptr;
    delete weights_;
    weights_ = nullptr;
  }
  static ModelWeights* weights_;
  static DeviceWeights* device_weights_;
};

ModelWeights* ReferenceTest::weights_ = nullptr;
DeviceWeights* ReferenceTest::device_weights_ = nullptr;

nlohmann::json ReadFixture(const std::string& name) {
  const std::string path =
      std::string(KVSERVE_SOURCE_DIR) + "/tests/model/fixtures/reference_" + name + ".json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "missing fixture " << path;
  return nlohmann::json::parse(in);
}

TEST_P(ReferenceTest, LogitsAndGreedyContinuationMatchFloat64Reference) {
  if (weights_ == nullptr) {
    GTEST_FAIL() << "default model missing at " << DefaultModelPath() << " (run scripts/setup.sh)";
  }
  const nlohmann::json fixture = ReadFixture(GetParam());
  const std::vector<int32_t> prompt = fixture["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> sampled_ids = fixture["sampled_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want_greedy = fixture["greedy_ids"].get<std::vector<int32_t>>();
  const int32_t vocab = weights_->config.vocab_size;
  const int32_t total = static_cast<int32_t>(prompt.size() + want_greedy.size());

  ForwardLimits limits{.max_num_tokens = 128, .max_num_seqs = 1, .max_logit_rows = 128};
  auto model = LlamaModel::Create(device_weights_, limits, kBlockSize);
  KVSERVE_ASSERT_OK(model);
  auto pool = KvPool::Create((*model)->kv_layout(), 32, (*model)->backend());
  KVSERVE_ASSERT_OK(pool);
  std::vector<int32_t> block_table((total + kBlockSize - 1) / kBlockSize);
  std::iota(block_table.rbegin(), block_table.rend(), 3);  // descending, non-contiguous order
  ForwardBatchBuilder builder(kBlockSize, static_cast<int32_t>(block_table.size()), 128, 1);

  // Prefill the whole prompt; logits of every position.
  KVSERVE_ASSERT_OK(builder.AddSequence(prompt, 0, block_table, LogitsFor::kAll));
  auto logits = (*model)->Forward(builder.View(), **pool);
  KVSERVE_ASSERT_OK(logits);
  double max_error = 0.0;
  for (const nlohmann::json& entry : fixture["positions"]) {
    const int32_t position = entry["position"].get<int32_t>();
    const float* row = logits->data() + static_cast<size_t>(position) * vocab;
    double max_diff = 0.0;
    double max_ref = 0.0;
    auto compare = [&](const nlohmann::json& ids, const nlohmann::json& values) {
      for (size_t i = 0; i < ids.size(); ++i) {
        const double want = values[i].get<double>();
        max_diff = std::max(max_diff, std::fabs(row[ids[i].get<int32_t>()] - want));
        max_ref = std::max(max_ref, std::fabs(want));
      }
    };
    compare(entry["top_ids"], entry["top_logits"]);
    compare(sampled_ids, entry["sampled_logits"]);
    EXPECT_LE(max_diff / max_ref, kMaxRelativeError) << "position " << position;
    max_error = std::max(max_error, max_diff / max_ref);
    EXPECT_EQ(std::max_element(row, row + vocab) - row, entry["top_ids"][0].get<int32_t>())
        << "argmax at position " << position;
  }
  std::printf("%s: max relative logit error vs float64 reference %.3g over %zu positions\n",
              GetParam().c_str(), max_error, fixture["positions"].size());

  // Greedy decode through the cache, one token per step.
  std::vector<int32_t> tokens = prompt;
  const float* last = logits->data() + (prompt.size() - 1) * vocab;
  std::vector<int32_t> got_greedy;
  for (size_t step = 0; step < want_greedy.size(); ++step) {
    const int32_t next = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
    got_greedy.push_back(next);
    tokens.push_back(next);
    if (step + 1 == want_greedy.size()) break;
    builder.Clear();
    KVSERVE_ASSERT_OK(builder.AddSequence({&tokens.back(), 1},
                                          static_cast<int32_t>(tokens.size()) - 1, block_table,
                                          LogitsFor::kLast));
    logits = (*model)->Forward(builder.View(), **pool);
    KVSERVE_ASSERT_OK(logits);
    last = logits->data();
  }
  EXPECT_EQ(got_greedy, want_greedy) << "reference text: " << fixture["greedy_text"];
}

// Logits of every prompt position of `prompt` from `weights` with a KV cache of `kv_dtype`.
std::vector<float> PromptLogits(const DeviceWeights* weights, KvDtype kv_dtype,
                                const std::vector<int32_t>& prompt) {
  ForwardLimits limits{.max_num_tokens = 128, .max_num_seqs = 1, .max_logit_rows = 128};
  auto model = LlamaModel::Create(weights, limits, kBlockSize, kv_dtype);
  KVSERVE_EXPECT_OK(model);
  auto pool = KvPool::Create((*model)->kv_layout(), 16, (*model)->backend());
  KVSERVE_EXPECT_OK(pool);
  std::vector<int32_t> table((prompt.size() + kBlockSize - 1) / kBlockSize);
  std::iota(table.begin(), table.end(), 2);
  ForwardBatchBuilder builder(kBlockSize, static_cast<int32_t>(table.size()), 128, 1);
  KVSERVE_EXPECT_OK(builder.AddSequence(prompt, 0, table, LogitsFor::kAll));
  auto logits = (*model)->Forward(builder.View(), **pool);
  KVSERVE_EXPECT_OK(logits);
  return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>{};
}

// Lower-precision weights against fp32 weights and KV (the fp32 weights are the GGUF blocks
// dequantized), over every prompt position of the fixture: the per-row error relative to the
// row's largest logit, and how often the most likely token is the same.
//  - bf16 / f16 weights with a KV cache of the same type. Measured over the four fixtures (118
//    positions): bf16 worst row 2.8e-2 (the AVX512-BF16 kernel also rounds the activations to
//    bf16), f16 1.8e-3, top-1 agreement 100% for both. bf16 keeps 8 mantissa bits (f16 11).
//  - the GGUF blocks as stored (Q4_1, Q8_0 embedding), computed with int8-quantized activations
//    (kernels/cpu/quant_linear.h), f32 KV: the only difference from the fp32 path is the
//    activations' rounding to int8 per 32-value block. Measured on each instruction set the
//    kernels choose from (KVSERVE_CPU_ISA): worst row 1.3e-1 (chat, AVX-512's tiled kernel),
//    9.2e-2 (AVX2), 1.05e-1 (scalar); top-1 agreement 100%, except story at 98.2% on AVX-512,
//    94.6% on AVX2 and 96.4% scalar: 1, 3 and 2 of 56 positions are near-ties that the rounding
//    order decides. Packed for the AVX-512 kernel (quant_linear.h; the "stored" case on such a
//    CPU, "stored rows" reads the GGUF rows): worst row 1.14e-1 (chat), top-1 97.4% there (1 of
//    39) and 98.2% on story; the rows as stored 1.08e-1, 100% and 98.2%. Packed for the AVX2
//    kernel (KVSERVE_CPU_ISA=avx2): worst row 1.13e-1 (chat), top-1 100% there and 94.6% on
//    story (3 of 56); the rows as stored there 8.3e-2, 100% and 98.2%.
// The error bounds leave ~2x margin over the worst measured row.
TEST_P(ReferenceTest, LowerPrecisionWeightsAndKvStayCloseToFloat32) {
  if (weights_ == nullptr) {
    GTEST_FAIL() << "default model missing at " << DefaultModelPath() << " (run scripts/setup.sh)";
  }
  const std::vector<int32_t> prompt =
      ReadFixture(GetParam())["prompt_ids"].get<std::vector<int32_t>>();
  const int32_t vocab = weights_->config.vocab_size;
  const std::vector<float> want = PromptLogits(device_weights_, KvDtype::kF32, prompt);
  absl::StatusOr<ModelWeights> stored =
      LoadWeights(DefaultModelPath(), {.keep_stored_types = true});
  KVSERVE_ASSERT_OK(stored);
  ASSERT_FALSE(stored->stored.empty());
  struct Case {
    const char* name;
    std::unique_ptr<DeviceWeights> weights;
    KvDtype kv;
    double max_row_error;
    double min_top1;
  };
  Case cases[] = {
      {"bf16", testing::UploadToCpu(*weights_, 2, kernels::DType::kBF16), KvDtype::kBF16, 0.06,
       0.95},
      {"f16", testing::UploadToCpu(*weights_, 2, kernels::DType::kF16), KvDtype::kF16, 0.005, 0.95},
      {"stored", testing::UploadToCpu(*stored, 2), KvDtype::kF32, 0.2, 0.9},
      {"stored rows", nullptr, KvDtype::kF32, 0.2, 0.9},
  };
  // "stored" is packed where the CPU runs the AVX2 or AVX-512 kernels (Q8_0 / Q4_1: all but the
  // norms); "stored rows" reads the GGUF rows in place.
  auto rows = DeviceWeights::Upload(
      *stored, std::make_shared<kernels::cpu::CpuBackend>(2, /*pack_weights=*/false),
      kernels::DType::kF32);
  KVSERVE_ASSERT_OK(rows);
  EXPECT_EQ((*rows)->num_packed(), 0);
  cases[3].weights = *std::move(rows);
  const DeviceWeights& packed = *cases[2].weights;
  EXPECT_FALSE(packed.embedding().packed);  // the lookup reads the table's rows
  if (kernels::cpu::CpuBackend(1).PackedWeightBytes(kernels::DType::kQ4_1, kernels::cpu::kPackRows,
                                                    32) > 0) {
    EXPECT_EQ(packed.num_packed(), 7 * weights_->config.num_layers + 1);  // + the tied output
    EXPECT_TRUE(packed.output().packed);
    EXPECT_TRUE(packed.layer(0).w_down.packed);
  } else {
    EXPECT_EQ(packed.num_packed(), 0);
  }
  for (const Case& c : cases) {
    const std::vector<float> got = PromptLogits(c.weights.get(), c.kv, prompt);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0.0;
    int agree = 0;
    const int rows = static_cast<int>(prompt.size());
    for (int r = 0; r < rows; ++r) {
      const auto row_got = absl::MakeConstSpan(got).subspan(static_cast<size_t>(r) * vocab, vocab);
      const auto row_want =
          absl::MakeConstSpan(want).subspan(static_cast<size_t>(r) * vocab, vocab);
      worst = std::max(worst, testing::RelativeError(row_got, row_want));
      agree += std::max_element(row_got.begin(), row_got.end()) - row_got.begin() ==
               std::max_element(row_want.begin(), row_want.end()) - row_want.begin();
    }
    const double top1 = static_cast<double>(agree) / rows;
    std::printf("[ %s ] %s weights vs f32: worst row error %.4f, top-1 agreement %.3f (%d rows)\n",
                GetParam().c_str(), c.name, worst, top1, rows);
    EXPECT_LT(worst, c.max_row_error) << c.name;
    EXPECT_GE(top1, c.min_top1) << c.name;
  }
}

// The serving engine (EngineCore: KvCacheManager blocks, chunked prefill, batched decode, the
// runner's device greedy path) reproduces the reference's greedy continuations for two prompts of
// different lengths in one batch.
TEST_F(ReferenceTest, EngineBatchReproducesGreedyContinuations) {
  if (weights_ == nullptr) {
    GTEST_FAIL() << "default model missing at " << DefaultModelPath() << " (run scripts/setup.sh)";
  }
  const nlohmann::json story = ReadFixture("story");
  const nlohmann::json capital = ReadFixture("capital");
  std::shared_ptr<const DeviceWeights> device = testing::UploadToCpu(*weights_, 2);
  auto runner = LlamaModelRunner::Create(device, {});
  KVSERVE_ASSERT_OK(runner);
  // A 9-token budget: the story prompt is prefilled in chunks while the other sequence decodes.
  EngineOptions options;
  options.block_size = 8;
  options.num_kv_blocks = 64;
  options.max_num_seqs = 2;
  options.max_num_batched_tokens = 9;
  options.max_context_len = 128;
  auto core = EngineCore::Create(options, *std::move(runner), nullptr, nullptr);
  KVSERVE_ASSERT_OK(core);
  std::vector<EngineRequest> requests(2);
  int index = 0;
  for (const nlohmann::json* fixture : {&story, &capital}) {
    EngineRequest& request = requests[index];
    request.request_id = absl::StrCat("r", index++);
    request.prompt_token_ids = (*fixture)["prompt_ids"].get<std::vector<int32_t>>();
    request.sampling.temperature = 0.0f;
    request.sampling.max_tokens = 32;
    request.sampling.ignore_eos = true;
  }
  std::vector<OfflineResult> results;
  auto stats = GenerateOffline(**core, requests, &results);
  KVSERVE_ASSERT_OK(stats);
  EXPECT_EQ(results[0].token_ids, story["greedy_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(results[1].token_ids, capital["greedy_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(stats->generated_tokens, 64);
  EXPECT_EQ(stats->prompt_tokens, static_cast<int64_t>(requests[0].prompt_token_ids.size() +
                                                       requests[1].prompt_token_ids.size()));
  EXPECT_EQ((*core)->manager().Stats().used_blocks, 0);
  KVSERVE_EXPECT_OK((*core)->manager().CheckInvariants());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceTest,
                         ::testing::Values("capital", "chat", "story", "code"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvserve
