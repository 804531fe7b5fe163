// The default model on a CUDA device against the CPU backend (label gpu; skips without a
// device): scripts/gpu_check.sh runs it on the lent GPU machine.
//  - f32 weights and f32 KV on the GPU: the greedy tokens of 5 prompts x 64 tokens through the
//    serving engine (EngineCore, decode graphs on) are identical to the CPU's;
//  - bf16 weights and KV on the GPU: top-1 agreement with the CPU's f32 logits, teacher-forced
//    over the prompts and their f32 continuations (printed; must stay >= 95%);
//  - the host KV tier on the GPU (page-locked memory, copies on the stream): a prompt whose
//    blocks went to the host tier and came back gives the bits of one that stayed in the pool.
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
#include "tests/engine/engine_test_util.h"
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

// Runs `requests` one after another through an engine on `device` (bf16 weights and KV); each
// result's tokens and every logprob (chosen and top-n), and the final stats.
struct InTurn {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logprobs;
  EngineStats stats;
};
// An engine core on `device` (bf16 weights and KV); null (with a test failure) when it cannot.
std::unique_ptr<EngineCore> MakeCore(const std::string& device, int32_t num_kv_blocks,
                                     int32_t num_host_blocks) {
  absl::StatusOr<CreatedRunner> created = CreateLlamaRunner({.model = DefaultModelPath(),
                                                             .device = device,
                                                             .dtype = "bfloat16",
                                                             .kv_cache_dtype = "bfloat16"});
  KVSERVE_EXPECT_OK(created);
  if (!created.ok()) return nullptr;
  EngineOptions options;
  options.block_size = 16;
  options.num_kv_blocks = num_kv_blocks;
  options.host_kv_bytes = int64_t{num_host_blocks} * created->runner->KvBytesPerBlock(16);
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 512;
  options.max_context_len = 512;
  auto core = EngineCore::Create(options, std::move(created->runner), nullptr, nullptr);
  KVSERVE_EXPECT_OK(core);
  if (!core.ok()) return nullptr;
  return *std::move(core);
}

InTurn RunInTurn(const std::string& device, int32_t num_kv_blocks, int32_t num_host_blocks,
                 const std::vector<EngineRequest>& requests) {
  InTurn out;
  std::unique_ptr<EngineCore> core = MakeCore(device, num_kv_blocks, num_host_blocks);
  if (core == nullptr) return out;
  for (const EngineRequest& request : requests) {
    std::shared_ptr<RequestStream> stream = testing::SubmitToCore(*core, request);
    testing::RunCore(*core);
    testing::RequestResult result;
    result.Drain(*stream);
    out.tokens.push_back(result.choices[0].tokens);
    out.logprobs.push_back(result.AllLogprobs());
  }
  out.stats = core->Stats();
  return out;
}

TEST_F(GpuModelTest, APrefixBackFromTheHostTierGivesTheBitsOfOneThatStayed) {
  // A 300-token prompt (18 full blocks), three 400-token prompts that take the whole 32-block
  // pool between its two runs, then the prompt again.
  std::vector<EngineRequest> requests;
  auto add = [&](const std::string& id, int32_t length, int32_t first) {
    EngineRequest& request = requests.emplace_back();
    request.request_id = id;
    for (int32_t i = 0; i < length; ++i)
      request.prompt_token_ids.push_back((first + 37 * i) % 4000);
    request.sampling.temperature = 0.0f;
    request.sampling.max_tokens = 8;
    request.sampling.ignore_eos = true;
    request.sampling.logprobs = 5;
  };
  add("first", 300, 11);
  for (int i = 0; i < 3; ++i) add(absl::StrCat("flood", i), 400, 1000 + 97 * i);
  add("again", 300, 11);
  const InTurn tiered = RunInTurn("cuda", 32, 64, requests);
  const InTurn kept = RunInTurn("cuda", 256, 0, requests);
  ASSERT_EQ(tiered.tokens.size(), requests.size());
  ASSERT_EQ(kept.tokens.size(), requests.size());
  EXPECT_EQ(tiered.stats.prefix_host_hit_tokens, 18 * 16) << "all of it from the host tier";
  EXPECT_GE(kept.stats.prefix_hit_tokens, 18 * 16);
  EXPECT_EQ(tiered.tokens.back(), kept.tokens.back());
  EXPECT_EQ(tiered.tokens.back(), tiered.tokens.front());
  ASSERT_EQ(tiered.logprobs.back().size(), kept.logprobs.back().size());
  ASSERT_EQ(tiered.logprobs.back().size(), 8u * 6u);
  for (size_t i = 0; i < kept.logprobs.back().size(); ++i) {
    EXPECT_EQ(tiered.logprobs.back()[i], kept.logprobs.back()[i]) << "logprob " << i;
  }
}

// KV block transfer on the device: blocks read out of one engine's GPU pool and written into
// another's page-locked host tier give the bits of the holder's own cache hit.
TEST_F(GpuModelTest, BlocksMovedToAnotherEngineGiveTheBitsOfTheHoldersHit) {
  EngineRequest request;
  for (int32_t i = 0; i < 300; ++i) request.prompt_token_ids.push_back((11 + 37 * i) % 4000);
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = 8;
  request.sampling.ignore_eos = true;
  request.sampling.logprobs = 5;
  auto run = [&](EngineCore& core, const std::string& id) {
    EngineRequest copy = request;
    copy.request_id = id;
    std::shared_ptr<RequestStream> stream = testing::SubmitToCore(core, copy);
    testing::RunCore(core);
    testing::RequestResult result;
    result.Drain(*stream);
    return result;
  };
  std::unique_ptr<EngineCore> holder = MakeCore("cuda", 64, 0);
  std::unique_ptr<EngineCore> target = MakeCore("cuda", 64, 32);
  ASSERT_NE(holder, nullptr);
  ASSERT_NE(target, nullptr);
  run(*holder, "first");
  testing::RequestResult kept = run(*holder, "again");
  absl::StatusOr<std::vector<KvBlockBytes>> exported =
      holder->ExportKvBlocks({.tokens = request.prompt_token_ids});
  KVSERVE_ASSERT_OK(exported);
  ASSERT_EQ(exported->size(), 18u);
  std::vector<std::string> data;
  for (KvBlockBytes& block : *exported) data.push_back(std::move(block.data));
  absl::StatusOr<int> imported = target->ImportKvBlocks({.tokens = request.prompt_token_ids}, data);
  KVSERVE_ASSERT_OK(imported);
  EXPECT_EQ(*imported, 18);
  testing::RequestResult moved = run(*target, "again");
  EXPECT_EQ(target->Stats().prefix_host_hit_tokens, 18 * 16);
  EXPECT_EQ(moved.choices[0].tokens, kept.choices[0].tokens);
  const std::vector<float> a = moved.AllLogprobs();
  const std::vector<float> b = kept.AllLogprobs();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "logprob " << i;
}

}  // namespace
}  // namespace kvserve
