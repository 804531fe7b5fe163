// The runner on "devices" that are not the plain CPU, simulated on the CPU backend:
//  - FakeDevice: reports a fixed memory size and counts what is allocated on it, so the KV pool
//    sizing from device memory (ProfileKvBytes, kv_sizing.h, EngineCore with kv_memory_bytes 0)
//    is checked against exact figures;
//  - GraphDevice: implements Capture by recording the calls' closure and Replay by running it
//    again, which is what a CUDA graph does with fixed buffers and fixed scalars, so the decode
//    graph path (buckets, padding, fixed table stride) is checked against eager steps;
//  - SecondDevice: "device 1" with a per-thread current device like CUDA's (0 on a new thread,
//    set by MakeCurrent), recording every kernel call made from a thread that is not bound to it,
//    so the engine thread's device selection (--device=cuda:1) is checked on the CPU.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "engine/engine.h"
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

// "Device 1": CUDA keeps the current device per thread and a new thread starts on device 0, so
// a kernel launched from a thread that did not select the backend's device runs on the wrong
// GPU. This backend models that: MakeCurrent sets the calling thread's current device to 1, and
// every kernel entry point counts a call from a thread whose current device is not 1.
class SecondDevice final : public kernels::cpu::CpuBackend {
 public:
  SecondDevice() : CpuBackend(1) {}

  bool MakeCurrent() override {
    current_device = kIndex;
    ++binds_;
    return bind_succeeds_;
  }
  void Embedding(const kernels::EmbeddingParams& p) override {
    Check();
    CpuBackend::Embedding(p);
  }
  void Linear(const kernels::LinearParams& p) override {
    Check();
    CpuBackend::Linear(p);
  }
  void LinearSameInput(const kernels::LinearParams* p, int count) override {
    Check();
    CpuBackend::LinearSameInput(p, count);
  }
  void WriteKv(const kernels::KvWriteParams& p) override {
    Check();
    CpuBackend::WriteKv(p);
  }
  void PagedAttention(const kernels::PagedAttentionParams& p) override {
    Check();
    CpuBackend::PagedAttention(p);
  }

  int64_t calls() const { return calls_.load(); }
  int64_t unbound_calls() const { return unbound_calls_.load(); }
  int binds() const { return binds_.load(); }
  void set_bind_succeeds(bool succeeds) { bind_succeeds_ = succeeds; }

 private:
  static constexpr int kIndex = 1;
  static thread_local int current_device;

  void Check() {
    ++calls_;
    if (current_device != kIndex) ++unbound_calls_;
  }

  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> unbound_calls_{0};
  std::atomic<int> binds_{0};
  std::atomic<bool> bind_succeeds_{true};
};
thread_local int SecondDevice::current_device = 0;

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

// A runner on `device` and the options of an engine over it (64 blocks).
std::unique_ptr<ModelRunner> RunnerOn(std::shared_ptr<SecondDevice> device) {
  auto weights = DeviceWeights::Upload(TinyHostWeights(), std::move(device), kernels::DType::kF32);
  KVSERVE_EXPECT_OK(weights);
  auto runner = LlamaModelRunner::Create(*std::move(weights), {});
  KVSERVE_EXPECT_OK(runner);
  return runner.ok() ? *std::move(runner) : nullptr;
}
EngineOptions OptionsWith64Blocks() {
  EngineOptions options = SmallOptions();
  options.num_kv_blocks = 64;
  return options;
}

EngineRequest GreedyRequest(std::string id) {
  EngineRequest request;
  request.request_id = std::move(id);
  request.prompt_token_ids = {3, 1, 4, 1, 5, 9, 2, 6};
  request.sampling.max_tokens = 6;
  request.sampling.ignore_eos = true;
  return request;
}

// --device=cuda:1: the runner is created and initialised on the main thread, and steps run on
// the engine's own thread, which must select the backend's device before its first kernel.
std::unique_ptr<Engine> EngineOn(std::shared_ptr<SecondDevice> device) {
  auto engine =
      Engine::Create(OptionsWith64Blocks(), RunnerOn(std::move(device)), nullptr, nullptr);
  KVSERVE_EXPECT_OK(engine);
  return engine.ok() ? *std::move(engine) : nullptr;
}

// Runs one greedy request to its end; its final status.
absl::Status RunOne(Engine& engine) {
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine.Submit(GreedyRequest("r"));
  KVSERVE_RETURN_IF_ERROR(stream.status());
  EngineOutput output;
  while ((*stream)->Pop(absl::Seconds(60), &output) != RequestStream::PopResult::kEnd) {
  }
  return (*stream)->final_status();
}

TEST(DeviceSelectionTest, TheEngineThreadSelectsTheBackendsDeviceBeforeItsFirstKernel) {
  auto device = std::make_shared<SecondDevice>();
  std::unique_ptr<Engine> engine = EngineOn(device);
  ASSERT_NE(engine, nullptr);
  const int64_t calls_before = device->calls();  // set-up on this (unbound) thread, if any
  const int64_t unbound_before = device->unbound_calls();
  KVSERVE_ASSERT_OK(engine->Start());
  KVSERVE_EXPECT_OK(RunOne(*engine));
  engine->Shutdown();
  EXPECT_GT(device->calls(), calls_before) << "the request ran kernels";
  EXPECT_EQ(device->unbound_calls(), unbound_before)
      << "every kernel of a step ran on a thread bound to device 1";
  EXPECT_EQ(device->binds(), 1) << "the engine thread binds once";
}

TEST(DeviceSelectionTest, TheFakeDeviceCatchesAStepOnAnUnboundThread) {
  // What the test above guards against: steps on a thread that never called BindThread.
  auto device = std::make_shared<SecondDevice>();
  auto core = EngineCore::Create(OptionsWith64Blocks(), RunnerOn(device), nullptr, nullptr);
  KVSERVE_ASSERT_OK(core);
  std::thread unbound([&] {
    std::vector<OfflineResult> results;
    KVSERVE_EXPECT_OK(GenerateOffline(**core, {GreedyRequest("r")}, &results));
  });
  unbound.join();
  EXPECT_GT(device->unbound_calls(), 0);
  const int64_t unbound_before = device->unbound_calls();
  std::thread bound([&] {
    KVSERVE_EXPECT_OK((*core)->BindThread());
    std::vector<OfflineResult> results;
    KVSERVE_EXPECT_OK(GenerateOffline(**core, {GreedyRequest("s")}, &results));
  });
  bound.join();
  EXPECT_EQ(device->unbound_calls(), unbound_before);
}

TEST(DeviceSelectionTest, ADeviceThatRefusesFailsTheEngineWithAClearStatus) {
  auto device = std::make_shared<SecondDevice>();
  device->set_bind_succeeds(false);
  std::unique_ptr<Engine> engine = EngineOn(device);
  ASSERT_NE(engine, nullptr);
  KVSERVE_ASSERT_OK(engine->Start());
  // The engine failed at its start: a request is refused or ended with the failure.
  for (int i = 0; i < 100 && engine->failure().ok(); ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_THAT(engine->failure(),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cannot bind this thread")));
  engine->Shutdown();
}

}  // namespace
}  // namespace kvserve
