// The runner on "devices" that are not the plain CPU, simulated on the CPU backend:
//  - FakeDevice: reports a fixed memory size and counts what is allocated on it, so the KV pool
//    sizing from device memory (ProfileKvBytes, kv_sizing.h, EngineCore with kv_memory_bytes 0)
//    is checked against exact figures;
//  - GraphDevice: implements Capture by recording the calls' closure and Replay by running it
//    again, which is what a CUDA graph does with fixed buffers and fixed scalars, so the decode
//    graph path (buckets, padding, fixed table stride) is checked against eager steps.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine_core.h"
#include "engine/offline_generate.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/device_weights.h"
#include "model/weights_loader.h"
#include "runner/kv_sizing.h"
#include "runner/llama_model_runner.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

// A CPU backend whose "device" has total_bytes of memory; free = total - what is allocated.
class FakeDevice final : public kernels::cpu::CpuBackend {
 public:
  explicit FakeDevice(int64_t total_bytes) : CpuBackend(1), total_bytes_(total_bytes) {}

  void* Allocate(size_t bytes) override {
    if (allocated_ + static_cast<int64_t>(bytes) > total_bytes_) return nullptr;
    void* ptr = CpuBackend::Allocate(bytes);
    sizes_[ptr] = static_cast<int64_t>(bytes);
    allocated_ += static_cast<int64_t>(bytes);
    return ptr;
  }
  void Free(void* ptr) override {
    allocated_ -= sizes_[ptr];
    sizes_.erase(ptr);
    CpuBackend::Free(ptr);
  }
  kernels::MemoryInfo GetMemoryInfo() const override {
    return {.total_bytes = total_bytes_, .free_bytes = total_bytes_ - allocated_};
  }
  int64_t allocated() const { return allocated_; }

 private:
  int64_t total_bytes_;
  int64_t allocated_ = 0;
  std::map<void*, int64_t> sizes_;
};

// A CPU backend with "graphs": Capture keeps the recorded closure, Replay runs it again.
class GraphDevice final : public kernels::cpu::CpuBackend {
 public:
  GraphDevice() : CpuBackend(1) {}
  std::unique_ptr<kernels::Graph> Capture(const std::function<void()>& record) override {
    ++captures_;
    class Recorded final : public kernels::Graph {
     public:
      Recorded(std::function<void()> body, int* replays)
          : body_(std::move(body)), replays_(replays) {}
      bool Replay() override {
        ++*replays_;
        body_();
        return true;
      }

     private:
      std::function<void()> body_;
      int* replays_;
    };
    return std::make_unique<Recorded>(record, &replays_);
  }
  int captures() const { return captures_; }
  int replays() const { return replays_; }

 private:
  int captures_ = 0;
  int replays_ = 0;
};

ModelWeights TinyHostWeights() {
  absl::StatusOr<ModelWeights> loaded = LoadWeights("synthetic:tiny:seed=5");
  KVSERVE_EXPECT_OK(loaded);
  return *std::move(loaded);
}

EngineOptions SmallOptions() {
  EngineOptions options;
  options.block_size = 8;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 64;
  options.max_context_len = 128;
  return options;
}

TEST(KvSizingTest, BudgetIsTheUtilizationShareMinusWhatIsInUse) {
  const int64_t gib = int64_t{1} << 30;
  EXPECT_EQ(*KvBudgetBytes({.total_bytes = 10 * gib, .free_bytes = 8 * gib}, 0.9), 7 * gib);
  // Memory other processes hold counts against the share too.
  EXPECT_EQ(*KvBudgetBytes({.total_bytes = 10 * gib, .free_bytes = 2 * gib}, 0.9), gib);
  const absl::StatusOr<int64_t> none =
      KvBudgetBytes({.total_bytes = 10 * gib, .free_bytes = gib}, 0.9);
  EXPECT_THAT(none,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("gpu_memory_utilization")));
}

// With kv_memory_bytes 0 the engine sizes the pool from the device: everything the worker holds
// (weights, step buffers, the pool) ends within utilization * total, and one more block would not.
TEST(KvSizingTest, EngineSizesThePoolFromAFakeDevicesMemory) {
  constexpr int64_t kTotal = int64_t{64} << 20;
  constexpr double kUtilization = 0.5;
  auto device = std::make_shared<FakeDevice>(kTotal);
  auto weights = DeviceWeights::Upload(TinyHostWeights(), device, kernels::DType::kF32);
  KVSERVE_ASSERT_OK(weights);
  const int64_t weight_bytes = (*weights)->bytes();
  EXPECT_EQ(device->allocated(), weight_bytes);
  auto runner = LlamaModelRunner::Create(*std::move(weights), {.memory_utilization = kUtilization});
  KVSERVE_ASSERT_OK(runner);
  LlamaModelRunner* raw = runner->get();
  const int64_t block_bytes = raw->KvBytesPerBlock(8);

  EngineOptions options = SmallOptions();
  options.kv_memory_bytes = 0;  // size from the device
  auto core = EngineCore::Create(options, *std::move(runner), nullptr, nullptr);
  KVSERVE_ASSERT_OK(core);
  const int64_t activations = raw->model()->activation_bytes();
  const int64_t budget = static_cast<int64_t>(kTotal * kUtilization) - weight_bytes - activations;
  // Usable blocks: the budget less the null block, in whole blocks.
  EXPECT_EQ((*core)->num_kv_blocks(), (budget - block_bytes) / block_bytes);
  EXPECT_LE(device->allocated(), static_cast<int64_t>(kTotal * kUtilization));
  EXPECT_GT(device->allocated() + block_bytes,
            static_cast<int64_t>(kTotal * kUtilization) - block_bytes);
}

TEST(KvSizingTest, ADeviceTooSmallForAnyBlockIsRefusedNamingTheFlag) {
  auto device = std::make_shared<FakeDevice>(int64_t{8} << 20);
  auto weights = DeviceWeights::Upload(TinyHostWeights(), device, kernels::DType::kF32);
  KVSERVE_ASSERT_OK(weights);
  auto runner = LlamaModelRunner::Create(*std::move(weights), {.memory_utilization = 0.05});
  KVSERVE_ASSERT_OK(runner);
  EngineOptions options = SmallOptions();
  options.kv_memory_bytes = 0;
  auto core = EngineCore::Create(options, *std::move(runner), nullptr, nullptr);
  ASSERT_FALSE(core.ok());
  EXPECT_THAT(core,
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("gpu_memory_utilization")));
}

// Greedy tokens of `prompts` (each max_tokens long) through an engine on `device`.
std::vector<std::vector<int32_t>> Generate(std::shared_ptr<kernels::Backend> device,
                                           bool enforce_eager, int32_t* graphs) {
  auto weights = DeviceWeights::Upload(TinyHostWeights(), std::move(device), kernels::DType::kF32);
  KVSERVE_EXPECT_OK(weights);
  auto runner = LlamaModelRunner::Create(*std::move(weights), {.enforce_eager = enforce_eager});
  KVSERVE_EXPECT_OK(runner);
  LlamaModelRunner* raw = runner->get();
  EngineOptions options = SmallOptions();
  options.num_kv_blocks = 128;
  auto core = EngineCore::Create(options, *std::move(runner), nullptr, nullptr);
  KVSERVE_EXPECT_OK(core);
  *graphs = raw->num_decode_graphs();
  // 7 sequences of different lengths, some sampled with a temperature (host path), finishing
  // at different steps: decode steps of 7, 6, ... sequences pad into the 8 and 4 buckets.
  std::vector<EngineRequest> requests;
  for (int32_t i = 0; i < 7; ++i) {
    EngineRequest request;
    request.request_id = absl::StrCat("r", i);
    for (int32_t t = 0; t < 5 + 3 * i; ++t)
      request.prompt_token_ids.push_back((7 * i + 3 * t) % 200);
    request.sampling.temperature = i % 3 == 0 ? 0.8f : 0.0f;
    request.sampling.seed = 11 + i;
    request.sampling.max_tokens = 4 + 2 * i;
    request.sampling.ignore_eos = true;
    requests.push_back(std::move(request));
  }
  std::vector<OfflineResult> results;
  absl::StatusOr<OfflineStats> stats = GenerateOffline(**core, requests, &results);
  KVSERVE_EXPECT_OK(stats);
  std::vector<std::vector<int32_t>> tokens;
  for (const OfflineResult& result : results) tokens.push_back(result.token_ids);
  return tokens;
}

TEST(DecodeGraphTest, ReplayedDecodeStepsGiveTheTokensOfEagerSteps) {
  int32_t eager_graphs = -1;
  const auto eager = Generate(std::make_shared<kernels::cpu::CpuBackend>(1), false, &eager_graphs);
  EXPECT_EQ(eager_graphs, 0);  // the CPU has no graphs
  auto device = std::make_shared<GraphDevice>();
  int32_t graphs = 0;
  const auto replayed = Generate(device, false, &graphs);
  EXPECT_EQ(graphs, 4);  // buckets 1, 2, 4, 8 for max_num_seqs 8
  EXPECT_EQ(device->captures(), 4);
  EXPECT_GT(device->replays(), 10);
  EXPECT_EQ(replayed, eager);

  auto eager_device = std::make_shared<GraphDevice>();
  int32_t none = -1;
  EXPECT_EQ(Generate(eager_device, /*enforce_eager=*/true, &none), eager);
  EXPECT_EQ(none, 0);
  EXPECT_EQ(eager_device->captures(), 0);
}

}  // namespace
}  // namespace kvserve
