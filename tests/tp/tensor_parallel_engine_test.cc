// A tensor-parallel group under the real EngineCore: the synthetic "tiny-tp" model (8 query
// heads, 4 KV heads) at TP = 2, 4 and 8 (KV heads replicated at 8), every rank a thread with its
// own CPU backend and Gloo communicator, all of them executing the leader's plans and block
// tables (ThreadedGroupRunner). The requests hit the prefix cache an earlier request filled,
// prefill in chunks, and overflow a small KV pool so that the scheduler preempts: every request's
// 64 greedy tokens are those of the unsharded model under the same engine.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine_core.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/quant_linear.h"
#include "model/weights_loader.h"
#include "runner/llama_model_runner.h"
#include "runner/runner_factory.h"
#include "tests/engine/engine_test_util.h"
#include "tests/model/gguf_test_writer.h"
#include "tests/model/llama_model_test_util.h"
#include "tests/model/safetensors_test_writer.h"
#include "tests/status_matchers.h"
#include "tests/tp/threaded_group_runner.h"

namespace kvserve {
namespace {

using testing::MakeRequest;
using testing::PhasedRun;

constexpr char kSpec[] = "synthetic:tiny-tp:seed=3";
constexpr int32_t kMaxTokens = 64;

EngineOptions Options() {
  EngineOptions options;
  options.block_size = 8;
  options.num_kv_blocks = 40;  // 320 token slots for ~600 tokens of demand: preemptions
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 48;  // prompts over 48 tokens prefill in chunks
  return options;
}

// Phase 1 fills the prefix cache with one request; phase 2 shares its first 32 tokens (four
// full blocks) with five more, some of them long enough to prefill in chunks.
std::vector<std::vector<EngineRequest>> Phases() {
  const uint32_t seed = 99;
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(3, 255);
  auto tokens = [&](int32_t n) {
    std::vector<int32_t> out(n);
    for (int32_t& t : out) t = token(rng);
    return out;
  };
  const std::vector<int32_t> shared = tokens(32);
  auto request = [&](const std::string& id, int32_t suffix) {
    std::vector<int32_t> prompt = shared;
    const std::vector<int32_t> rest = tokens(suffix);
    prompt.insert(prompt.end(), rest.begin(), rest.end());
    EngineRequest r = MakeRequest(id, prompt, kMaxTokens);
    r.sampling.ignore_eos = true;
    return r;
  };
  return {{request("first", 9)},
          {request("a", 3), request("b", 60), request("c", 17), request("d", 41), request("e", 1)}};
}

const PhasedRun& Unsharded() {
  static const PhasedRun* run = [] {
    absl::StatusOr<ModelWeights> host = LoadWeights(kSpec);
    KVSERVE_EXPECT_OK(host);
    auto weights = DeviceWeights::Upload(*host, std::make_shared<kernels::cpu::CpuBackend>(1),
                                         kernels::DType::kF32);
    KVSERVE_EXPECT_OK(weights);
    auto runner = LlamaModelRunner::Create(*std::move(weights), {.enforce_eager = true});
    KVSERVE_EXPECT_OK(runner);
    return new PhasedRun(testing::RunPhases(*std::move(runner), Options(), Phases()));
  }();
  return *run;
}

class TensorParallelEngineTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(TensorParallelEngineTest, GreedyOutputsEqualTheUnshardedModel) {
  const PhasedRun& want = Unsharded();
  ASSERT_EQ(want.results.size(), 6u);
  // The scenario does what it claims, unsharded already.
  EXPECT_GT(want.stats.num_preemptions, 0);
  EXPECT_GE(want.stats.prefix_hit_tokens, 5 * 32);
  EXPECT_GT(want.num_mixed_steps, 0);

  auto group = testing::ThreadedGroupRunner::Create(kSpec, GetParam());
  KVSERVE_ASSERT_OK(group);
  const PhasedRun got = testing::RunPhases(*std::move(group), Options(), Phases());
  EXPECT_EQ(got.stats.num_preemptions, want.stats.num_preemptions);
  EXPECT_EQ(got.stats.prefix_hit_tokens, want.stats.prefix_hit_tokens);
  EXPECT_EQ(got.num_mixed_steps, want.num_mixed_steps);
  std::printf(
      "TP=%d: %lld steps, %lld preemptions, %lld prefix-hit tokens, %d steps mixing a "
      "prefill chunk with decodes\n",
      GetParam(), static_cast<long long>(got.stats.num_steps),
      static_cast<long long>(got.stats.num_preemptions),
      static_cast<long long>(got.stats.prefix_hit_tokens), got.num_mixed_steps);
  for (const auto& [id, result] : want.results) {
    ASSERT_TRUE(got.results.contains(id)) << id;
    const auto& choice = got.results.at(id).choices;
    ASSERT_EQ(choice.size(), 1u) << id;
    EXPECT_EQ(result.choices.at(0).tokens.size(), static_cast<size_t>(kMaxTokens)) << id;
    EXPECT_EQ(choice.at(0).tokens, result.choices.at(0).tokens) << id;
  }
}

// The same scenario on 2 ranks with a host KV tier under each rank's pool: the plans carry the
// host copies to every rank, each rank copies its own KV heads, and the tokens stay those of the
// unsharded model without a tier, while blocks the small pool evicted come back from the host.
TEST(TensorParallelHostTierTest, GreedyOutputsWithAHostTierEqualTheUnshardedModel) {
  const PhasedRun& want = Unsharded();
  auto group = testing::ThreadedGroupRunner::Create(kSpec, 2);
  KVSERVE_ASSERT_OK(group);
  EngineOptions options = Options();
  options.host_kv_bytes = 64 * (*group)->KvBytesPerBlock(options.block_size);
  const PhasedRun got = testing::RunPhases(*std::move(group), options, Phases());
  EXPECT_GT(got.stats.host_stored_blocks, 0);
  EXPECT_GT(got.stats.prefix_host_hit_tokens, 0);
  EXPECT_GE(got.stats.prefix_hit_tokens, want.stats.prefix_hit_tokens);
  for (const auto& [id, result] : want.results) {
    ASSERT_TRUE(got.results.contains(id)) << id;
    EXPECT_EQ(got.results.at(id).choices.at(0).tokens, result.choices.at(0).tokens) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, TensorParallelEngineTest, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int32_t>& info) {
                           return "TP" + std::to_string(info.param);
                         });

// Every rank's pool has the engine's number of blocks, of its own KV heads.
TEST(TensorParallelRunnerTest, EveryRankHoldsItsKvHeadsInTheSameNumberOfBlocks) {
  auto group = testing::ThreadedGroupRunner::Create(kSpec, 8);
  KVSERVE_ASSERT_OK(group);
  absl::StatusOr<ModelWeights> whole = LoadWeights(kSpec);
  KVSERVE_ASSERT_OK(whole);
  auto weights = testing::UploadToCpu(*whole);
  auto unsharded = LlamaModelRunner::Create(std::move(weights), {.enforce_eager = true});
  KVSERVE_ASSERT_OK(unsharded);
  // 4 KV heads over 8 ranks: each rank keeps one, a quarter of the whole model's KV bytes.
  EXPECT_EQ((*group)->KvBytesPerBlock(8) * 4, (*unsharded)->KvBytesPerBlock(8));
  KVSERVE_ASSERT_OK((*group)->Initialize({.block_size = 8,
                                          .num_blocks = 17,
                                          .max_num_batched_tokens = 32,
                                          .max_num_seqs = 4,
                                          .max_context_len = 128}));
  for (int32_t rank = 0; rank < 8; ++rank) {
    EXPECT_EQ((*group)->rank(rank).model()->kv_layout().num_kv_heads_local, 1);
  }
}

// The KV budget is per rank: the same kv_memory_bytes holds 4 times as many blocks over the
// group as over the whole model (4 KV heads; one per rank at TP = 8).
TEST(TensorParallelRunnerTest, KvMemoryBudgetIsPerRank) {
  EngineOptions options;
  options.block_size = 8;
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 32;
  options.max_context_len = 128;
  absl::StatusOr<ModelWeights> whole = LoadWeights(kSpec);
  KVSERVE_ASSERT_OK(whole);
  auto unsharded = LlamaModelRunner::Create(testing::UploadToCpu(*whole), {.enforce_eager = true});
  KVSERVE_ASSERT_OK(unsharded);
  options.kv_memory_bytes = 100 * (*unsharded)->KvBytesPerBlock(8);
  auto whole_core = EngineCore::Create(options, *std::move(unsharded), nullptr, nullptr);
  KVSERVE_ASSERT_OK(whole_core);
  EXPECT_EQ((*whole_core)->num_kv_blocks(), 100);
  auto group = testing::ThreadedGroupRunner::Create(kSpec, 8);
  KVSERVE_ASSERT_OK(group);
  auto group_core = EngineCore::Create(options, *std::move(group), nullptr, nullptr);
  KVSERVE_ASSERT_OK(group_core);
  EXPECT_EQ((*group_core)->num_kv_blocks(), 400);
}

// --kv_cache_dtype=auto with GGUF blocks computed as stored on the CPU is an f16 cache, and the
// runner's pool is what the factory reports (half the bytes per block of float32).
TEST(RunnerFactoryTest, AutoKvCacheIsF16ForStoredBlocksOnTheCpu) {
  testing::TempDir dir("tensor_parallel_engine_test");
  const std::string path = (dir.path() / "q.gguf").string();
  testing::WriteFile(path, testing::QuantizedModelGguf());
  int64_t bytes[2] = {};
  for (int i = 0; i < 2; ++i) {
    RunnerFactoryOptions options;
    options.model = path;
    options.num_threads = 1;
    options.kv_cache_dtype = i == 0 ? "auto" : "float32";
    absl::StatusOr<CreatedRunner> created = CreateLlamaRunner(options);
    KVSERVE_ASSERT_OK(created);
    EXPECT_EQ(created->kv_dtype, i == 0 ? KvDtype::kF16 : KvDtype::kF32);
    bytes[i] = created->runner->KvBytesPerBlock(16);
  }
  EXPECT_EQ(2 * bytes[0], bytes[1]);
}

// The runner factory loads a rank's shard; a block-quantized matrix whose column slice is off its
// block boundaries (Q4_K o_proj and down_proj, 512 columns over 4 ranks) is converted and said.
TEST(TensorParallelRunnerTest, FactoryConvertsColumnSlicesOffBlockBoundaries) {
  testing::TempDir dir("tensor_parallel_engine_test");
  const std::string path = (dir.path() / "q.gguf").string();
  testing::WriteFile(path, testing::QuantizedModelGguf());
  for (auto [size, converted, types] :
       {std::tuple{2, 0, "f32+f16x1+q4_kx2+q8_0x5"}, std::tuple{4, 2, "f32+f16x1+q8_0x5"}}) {
    RunnerFactoryOptions options;
    options.model = path;
    options.num_threads = 1;
    options.tensor_parallel = {.rank = size - 1, .size = size};
    ::testing::internal::CaptureStderr();
    absl::StatusOr<CreatedRunner> created = CreateLlamaRunner(options);
    const std::string log = ::testing::internal::GetCapturedStderr();
    KVSERVE_ASSERT_OK(created);
    EXPECT_EQ(created->num_converted_for_shard, converted) << "TP=" << size;
    // The Q8_0 matrices, and those converted to f32, are packed where the CPU backend packs
    // that type (AVX2, AVX-512).
    const kernels::cpu::CpuBackend cpu(1);
    const int packed =
        (cpu.PackedWeightBytes(kernels::DType::kQ8_0, kernels::cpu::kPackRows, 32) > 0 ? 5 : 0) +
        (cpu.PackedWeightBytes(kernels::DType::kF32, 8, 32) > 0 ? converted : 0);
    EXPECT_EQ(created->weight_types,
              std::string(types) + (packed > 0 ? absl::StrCat(" (", packed, " packed)") : ""))
        << "TP=" << size;
    if (converted > 0) {
      EXPECT_NE(log.find("tensor-parallel rank 3 of 4: 2 matrices (layers.0.wo, ...) have column "
                         "slices off their block boundaries; converted to f32 at load"),
                std::string::npos)
          << log;
    } else {
      EXPECT_EQ(log, "");
    }
  }
}

}  // namespace
}  // namespace kvserve
