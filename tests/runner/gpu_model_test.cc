// The default model on a CUDA device against the CPU backend (label gpu; skips without a
// device): scripts/gpu_check.sh runs it on the lent GPU machine.
//  - f32 weights and f32 KV on the GPU: the greedy tokens of 5 prompts x 64 tokens through the
//    serving engine (EngineCore, decode graphs on) are identical to the CPU's;
//  - bf16 weights and KV on the GPU: top-1 agreement with the CPU's f32 logits, teacher-forced
//    over the prompts and their f32 continuations (printed; must stay >= 95%).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/engine_core.h"
#include "engine/offline_generate.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "model/default_model.h"
#include "model/device_weights.h"
#include "model/llama_model.h"
#include "model/weights_loader.h"
#include "nlohmann/json.hpp"
#include "runner/runner_factory.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

constexpr int32_t kMaxTokens = 64;

// The source tree the fixtures are read from: $KVSERVE_SOURCE_DIR where set (the device bundle
// runs from a copy of the tree elsewhere, scripts/gpu_check.sh), else the one built from.
std::string SourceDir() {
  const char* dir = std::getenv("KVSERVE_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? dir : KVSERVE_SOURCE_DIR;
}

std::vector<std::vector<int32_t>> Prompts() {
  std::vector<std::vector<int32_t>> prompts;
  for (const char* name : {"capital", "chat", "story", "code"}) {
    std::ifstream in(SourceDir() + "/tests/model/fixtures/reference_" + name + ".json");
    EXPECT_TRUE(in.good()) << "missing fixture under " << SourceDir() << "/tests/model/fixtures";
    prompts.push_back(nlohmann::json::parse(in)["prompt_ids"].get<std::vector<int32_t>>());
  }
  prompts.push_back({1, 504, 3458, 282, 1345, 314});  // a fifth, short one
  return prompts;
}

// Greedy continuations through the serving engine on `device` with f32 weights and KV.
std::vector<std::vector<int32_t>> GreedyOn(const std::string& device) {
  absl::StatusOr<CreatedRunner> created = CreateLlamaRunner({.model = DefaultModelPath(),
                                                             .device = device,
                                                             .dtype = "float32",
                                                             .kv_cache_dtype = "float32"});
  KVSERVE_EXPECT_OK(created);
  if (!created.ok()) return {};
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = 256;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 256;
  options.max_context_len = 512;
  auto core = EngineCore::Create(options, std::move(created->runner), nullptr, nullptr);
  KVSERVE_EXPECT_OK(core);
  if (!core.ok()) return {};
  std::vector<EngineRequest> requests;
  for (const std::vector<int32_t>& prompt : Prompts()) {
    EngineRequest& request = requests.emplace_back();
    request.request_id = absl::StrCat("p", requests.size());
    request.prompt_token_ids = prompt;
    request.sampling.temperature = 0.0f;
    request.sampling.max_tokens = kMaxTokens;
    request.sampling.ignore_eos = true;
  }
  std::vector<OfflineResult> results;
  absl::StatusOr<OfflineStats> stats = GenerateOffline(**core, requests, &results);
  KVSERVE_EXPECT_OK(stats);
  std::vector<std::vector<int32_t>> tokens;
  for (const OfflineResult& result : results) tokens.push_back(result.token_ids);
  return tokens;
}

class GpuModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    if (kernels::CreateBackend("cuda", 0, &error) == nullptr) {
      GTEST_SKIP() << "no CUDA device: " << error;
    }
    // KVSERVE_MODEL may name a synthetic model (scripts/gpu_check.sh: the default model's shape,
    // which travels to a GPU machine where the file cannot); a file must exist.
    const std::string model = DefaultModelPath();
    if (!absl::StartsWith(model, "synthetic:")) {
      ASSERT_TRUE(std::filesystem::exists(model))
          << "default model missing at " << model << " (run scripts/setup.sh)";
    }
  }
};

TEST_F(GpuModelTest, Float32GreedyTokensEqualTheCpus) {
  const auto cpu = GreedyOn("cpu");
  const auto gpu = GreedyOn("cuda");
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu[i], cpu[i]) << "prompt " << i;
    EXPECT_EQ(static_cast<int32_t>(gpu[i].size()), kMaxTokens);
  }
}

// Logits of every position of `tokens` on `backend` with weights and KV of the given types.
std::vector<float> AllLogits(const ModelWeights& host, std::shared_ptr<kernels::Backend> backend,
                             kernels::DType dtype, KvDtype kv, const std::vector<int32_t>& tokens) {
  auto weights = DeviceWeights::Upload(host, std::move(backend), dtype);
  KVSERVE_EXPECT_OK(weights);
  const int32_t n = static_cast<int32_t>(tokens.size());
  auto model = LlamaModel::Create(
      weights->get(), {.max_num_tokens = n, .max_num_seqs = 1, .max_logit_rows = n}, 16, kv);
  KVSERVE_EXPECT_OK(model);
  auto pool = KvPool::Create((*model)->kv_layout(), 2 + (n + 15) / 16, (*model)->backend());
  KVSERVE_EXPECT_OK(pool);
  std::vector<int32_t> table((n + 15) / 16);
  std::iota(table.begin(), table.end(), 1);
  ForwardBatchBuilder builder(16, static_cast<int32_t>(table.size()), n, 1);
  KVSERVE_EXPECT_OK(builder.AddSequence(tokens, 0, table, LogitsFor::kAll));
  auto logits = (*model)->Forward(builder.View(), **pool);
  KVSERVE_EXPECT_OK(logits);
  return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>{};
}

TEST_F(GpuModelTest, Bfloat16TopOneAgreesWithTheCpusFloat32) {
  absl::StatusOr<ModelWeights> host = LoadWeights(DefaultModelPath());
  KVSERVE_ASSERT_OK(host);
  const int32_t vocab = host->config.vocab_size;
  const auto continuations = GreedyOn("cpu");
  const auto prompts = Prompts();
  int64_t agree = 0, rows = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> tokens = prompts[i];
    tokens.insert(tokens.end(), continuations[i].begin(), continuations[i].end());
    std::string error;
    const auto want = AllLogits(*host, kernels::CreateBackend("cpu", 0, &error),
                                kernels::DType::kF32, KvDtype::kF32, tokens);
    const auto got = AllLogits(*host, kernels::CreateBackend("cuda", 0, &error),
                               kernels::DType::kBF16, KvDtype::kBF16, tokens);
    ASSERT_EQ(got.size(), want.size());
    for (size_t r = 0; r < tokens.size(); ++r) {
      const float* g = got.data() + r * vocab;
      const float* w = want.data() + r * vocab;
      agree += std::max_element(g, g + vocab) - g == std::max_element(w, w + vocab) - w;
      ++rows;
    }
  }
  const double top1 = static_cast<double>(agree) / static_cast<double>(rows);
  std::printf("gpu_check bf16_top1_agreement=%.4f rows=%lld\n", top1, static_cast<long long>(rows));
  EXPECT_GE(top1, 0.95);
}

}  // namespace
}  // namespace kvserve
