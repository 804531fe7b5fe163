// The CUDA elementwise kernels against the CPU ones on the same random inputs, the memory API,
// graph capture and replay, and the errors the backend reports. Skips (GTEST_SKIP) where no
// CUDA device is present; ctest label gpu. Linear: cuda_linear_test.cc; attention:
// cuda_attention_test.cc.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::AttentionSizes;
using testing::CudaTest;
using testing::DeviceBuffer;
using testing::ExpectNear;
using testing::MakeAttentionParams;
using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::RandomFloats;
using testing::SizesOf;
using testing::StoreAs;

using CudaKernelsTest = CudaTest;

TEST_F(CudaKernelsTest, EmbeddingOfEachTableTypeMatchesCpu) {
  const int vocab = 1000, hidden = 72, tokens = 37;
  const std::vector<float> values = RandomFloats(vocab * hidden, rng_);
  std::vector<int32_t> ids(tokens);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng_() % vocab);
  DeviceBuffer<int32_t> d_ids(ids);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const std::vector<uint8_t> table = StoreAs(values, dtype);
    std::vector<float> want(tokens * hidden);
    cpu::Embedding({ids.data(), table.data(), want.data(), tokens, vocab, hidden, dtype});
    DeviceBuffer<uint8_t> d_table(table);
    DeviceBuffer<float> d_out(std::vector<float>(want.size()));
    gpu_->Embedding({d_ids.get(), d_table.get(), d_out.get(), tokens, vocab, hidden, dtype});
    Sync();
    EXPECT_EQ(d_out.ToHost(), want);
  }
}

TEST_F(CudaKernelsTest, RmsNormAndAddRmsNormMatchCpu) {
  for (int hidden : {72, 576, 1000}) {
    const int tokens = 37;
    const std::vector<float> x = RandomFloats(tokens * hidden, rng_, -3.0f, 3.0f);
    const std::vector<float> w = RandomFloats(hidden, rng_, 0.5f, 1.5f);
    std::vector<float> residual = RandomFloats(tokens * hidden, rng_);
    std::vector<float> want(x.size()), want_add(x.size());
    DeviceBuffer<float> d_x(x), d_w(w), d_residual(residual), d_out(want);
    cpu::RmsNorm({x.data(), w.data(), want.data(), tokens, hidden, 1e-5f});
    cpu::AddRmsNorm({residual.data(), x.data(), w.data(), want_add.data(), tokens, hidden, 1e-5f});
    gpu_->RmsNorm({d_x.get(), d_w.get(), d_out.get(), tokens, hidden, 1e-5f});
    Sync();
    ExpectNear(d_out.ToHost(), want, 1e-5f);
    gpu_->AddRmsNorm({d_residual.get(), d_x.get(), d_w.get(), d_out.get(), tokens, hidden, 1e-5f});
    Sync();
    ExpectNear(d_out.ToHost(), want_add, 1e-5f);
    ExpectNear(d_residual.ToHost(), residual, 1e-6f);
  }
}

TEST_F(CudaKernelsTest, RopeMatchesCpuForBothStylesAndScalings) {
  const int tokens = 37, heads = 9, kv_heads = 3;
  for (int head_dim : {64, 128}) {
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      for (RopeScalingType scaling : {RopeScalingType::kNone, RopeScalingType::kLlama3}) {
        const int64_t stride = static_cast<int64_t>(heads + 2 * kv_heads) * head_dim;
        std::vector<float> qkv = RandomFloats(tokens * stride, rng_);
        std::vector<int32_t> positions(tokens);
        for (int32_t& pos : positions) pos = static_cast<int32_t>(rng_() % 20000);
        RopeConfig config;
        config.head_dim = head_dim;
        config.theta = 500000.0f;
        config.style = style;
        config.scaling = scaling;
        config.factor = 8.0f;
        DeviceBuffer<float> d_qkv(qkv);
        DeviceBuffer<int32_t> d_pos(positions);
        cpu::Rope({qkv.data(), qkv.data() + heads * head_dim, positions.data(), tokens, heads,
                   kv_heads, stride, stride, config});
        gpu_->Rope({d_qkv.get(), d_qkv.get() + heads * head_dim, d_pos.get(), tokens, heads,
                    kv_heads, stride, stride, config});
        Sync();
        ExpectNear(d_qkv.ToHost(), qkv, 1e-5f);
      }
    }
  }
}

TEST_F(CudaKernelsTest, SiluGatherArgmaxMatchCpu) {
  const int tokens = 37, inter = 1536, vocab = 1000;
  const std::vector<float> gate = RandomFloats(tokens * inter, rng_, -6.0f, 6.0f);
  const std::vector<float> up = RandomFloats(tokens * inter, rng_);
  std::vector<float> want(gate.size());
  cpu::SiluAndMul({gate.data(), up.data(), want.data(), tokens, inter});
  DeviceBuffer<float> d_gate(gate), d_up(up), d_out(want);
  gpu_->SiluAndMul({d_gate.get(), d_up.get(), d_out.get(), tokens, inter});
  Sync();
  ExpectNear(d_out.ToHost(), want, 1e-5f);

  std::vector<float> logits = RandomFloats(tokens * vocab, rng_);
  logits[5 * vocab + 10] = logits[5 * vocab + 900] = 3.0f;  // a tie
  const std::vector<int32_t> rows = {36, 0, 5, 17};
  std::vector<float> gathered(rows.size() * vocab);
  std::vector<int32_t> want_ids(rows.size());
  cpu::GatherRows({logits.data(), rows.data(), gathered.data(), tokens, 4, vocab});
  cpu::Argmax({gathered.data(), want_ids.data(), 4, vocab});
  DeviceBuffer<float> d_logits(logits), d_gathered(gathered);
  DeviceBuffer<int32_t> d_rows(rows), d_ids(std::vector<int32_t>(4, -1));
  gpu_->GatherRows({d_logits.get(), d_rows.get(), d_gathered.get(), tokens, 4, vocab});
  gpu_->Argmax({d_gathered.get(), d_ids.get(), 4, vocab});
  Sync();
  EXPECT_EQ(d_gathered.ToHost(), gathered);
  EXPECT_EQ(d_ids.ToHost(), want_ids);
  EXPECT_EQ(want_ids[2], 10);
}

// ---------------------------------------------------------------------------------------------
// Memory API.

TEST_F(CudaKernelsTest, MemoryApiCopiesThereAndBackAndReportsFreeMemory) {
  const size_t bytes = size_t{64} << 20;
  std::vector<uint8_t> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(rng_() & 0xFF);
  void* a = gpu_->Allocate(bytes);
  void* b = gpu_->Allocate(bytes);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  gpu_->CopyToDevice(a, pattern.data(), bytes);
  gpu_->CopyOnDevice(b, a, bytes);
  gpu_->Memset(static_cast<uint8_t*>(b) + 1000, 0xAB, 4096);
  std::vector<uint8_t> back(bytes);
  gpu_->CopyToHost(back.data(), b, bytes);
  Sync();
  std::vector<uint8_t> want = pattern;
  std::memset(want.data() + 1000, 0xAB, 4096);
  EXPECT_TRUE(back == want);
  gpu_->Free(a);
  gpu_->Free(b);

  const MemoryInfo before = gpu_->GetMemoryInfo();
  std::printf("device memory: %.2f GiB total, %.2f GiB free\n", before.total_bytes / 1073741824.0,
              before.free_bytes / 1073741824.0);
  EXPECT_GT(before.total_bytes, int64_t{1} << 30);
  EXPECT_GT(before.free_bytes, 0);
  EXPECT_LE(before.free_bytes, before.total_bytes);
  const size_t big = size_t{1} << 30;
  void* held = gpu_->Allocate(big);
  ASSERT_NE(held, nullptr);
  const MemoryInfo during = gpu_->GetMemoryInfo();
  EXPECT_LE(during.free_bytes, before.free_bytes - static_cast<int64_t>(big / 2));
  gpu_->Free(held);

  // Out of memory is a nullptr, not a broken backend.
  EXPECT_EQ(gpu_->Allocate(static_cast<size_t>(before.total_bytes) * 2), nullptr);
  void* small = gpu_->Allocate(0);
  EXPECT_NE(small, nullptr);
  gpu_->Free(small);
  Sync();
}

// ---------------------------------------------------------------------------------------------
// Errors are reported by Synchronize, naming what was wrong.

TEST_F(CudaKernelsTest, UnsupportedWeightTypeIsAReportedError) {
  DeviceBuffer<float> d_x(std::vector<float>(64)), d_w(std::vector<float>(64 * 64)),
      d_y(std::vector<float>(64));
  gpu_->Linear({d_x.get(), d_w.get(), nullptr, d_y.get(), 1, 64, 2, DType::kQ8_0});
  EXPECT_FALSE(gpu_->Synchronize());
}

// 16 tokens: past the GEMV, which needs no scratch, so through cuBLAS and the scratch.
TEST_F(CudaKernelsTest, SixteenBitLinearWithoutReserveIsAReportedError) {
  DeviceBuffer<float> d_x(std::vector<float>(16 * 64)), d_y(std::vector<float>(16 * 64));
  DeviceBuffer<uint16_t> d_w(std::vector<uint16_t>(64 * 64));
  gpu_->Linear({d_x.get(), d_w.get(), nullptr, d_y.get(), 16, 64, 64, DType::kBF16});
  EXPECT_FALSE(gpu_->Synchronize());
}

// ---------------------------------------------------------------------------------------------
// Graphs.

// One decode step's worth of calls on device buffers: KV write, attention over a bf16 cache,
// a bf16 projection with bias, an argmax.
struct DecodeStep {
  DecodeStep(const PagedBatch& b, const cuda::CudaBackend& gpu, std::mt19937& rng)
      : k_cache(testing::StoreAs(b.k_cache, DType::kBF16)),
        v_cache(testing::StoreAs(b.v_cache, DType::kBF16)),
        new_k(b.new_k),
        new_v(b.new_v),
        q(b.q),
        attn_out(std::vector<float>(b.q.size())),
        w(testing::StoreAs(RandomFloats(static_cast<size_t>(kOut) * b.num_heads * b.head_dim, rng),
                           DType::kBF16)),
        bias(RandomFloats(kOut, rng)),
        y(std::vector<float>(static_cast<size_t>(b.num_tokens) * kOut)),
        ids(std::vector<int32_t>(b.num_tokens)),
        slots(b.slot_mapping),
        query_start(b.query_start),
        context_lens(b.context_lens),
        block_tables(b.block_tables) {
    const PagedKvView view{k_cache.get(), v_cache.get(), b.num_blocks, b.num_kv_heads,
                           b.block_size,  b.head_dim,    DType::kBF16};
    write = {new_k.get(), new_v.get(), slots.get(), b.num_tokens, 0, 0, view};
    const AttentionShape shape{b.num_tokens,   static_cast<int32_t>(b.seqs.size()),
                               16384,          b.num_heads,
                               b.num_kv_heads, b.head_dim,
                               b.block_size};
    workspace_bytes = std::max<size_t>(1, gpu.AttentionWorkspaceBytes(shape));
    EXPECT_EQ(cudaMalloc(&workspace, workspace_bytes), cudaSuccess);
    AttentionSizes sizes = SizesOf(b);  // decodes only: max_query_len 1
    sizes.max_context_len = 16384;      // planned for longer contexts than these: still right
    attention =
        MakeAttentionParams({q.get(), query_start.get(), context_lens.get(), block_tables.get()},
                            sizes, view, attn_out.get(), workspace, workspace_bytes);
    linear = {attn_out.get(),           w.get(), bias.get(),  y.get(), b.num_tokens,
              b.num_heads * b.head_dim, kOut,    DType::kBF16};
    argmax = {y.get(), ids.get(), b.num_tokens, kOut};
  }
  ~DecodeStep() { cudaFree(workspace); }

  void Run(Backend* backend) const {
    backend->WriteKv(write);
    backend->PagedAttention(attention);
    backend->Linear(linear);
    backend->Argmax(argmax);
  }

  static constexpr int kOut = 256;

  DeviceBuffer<uint8_t> k_cache, v_cache;
  DeviceBuffer<float> new_k, new_v, q, attn_out;
  DeviceBuffer<uint8_t> w;
  DeviceBuffer<float> bias, y;
  DeviceBuffer<int32_t> ids, slots, query_start, context_lens, block_tables;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  KvWriteParams write{};
  PagedAttentionParams attention{};
  LinearParams linear{};
  ArgmaxParams argmax{};
};

TEST_F(CudaKernelsTest, GraphReplayReadsNewInputsAndMatchesEagerRuns) {
  const PagedBatch b =
      MakePagedBatch({{100, 1}, {37, 1}, {600, 1}, {3000, 1}}, 32, 8, 128, 16, 2, rng_);
  ASSERT_TRUE(gpu_->ReserveLinear(b.num_tokens, b.num_heads * b.head_dim));
  DecodeStep step(b, *gpu_, rng_);
  step.Run(gpu_.get());  // eager, inputs A
  Sync();
  const std::vector<float> y_a = step.y.ToHost();

  std::unique_ptr<Graph> graph = gpu_->Capture([&] { step.Run(gpu_.get()); });
  ASSERT_NE(graph, nullptr);
  Sync();
  EXPECT_EQ(step.y.ToHost(), y_a) << "capture must not run the calls";

  // Inputs B, replayed twice, then the same calls eagerly.
  step.q.Upload(RandomFloats(b.q.size(), rng_));
  step.new_k.Upload(RandomFloats(b.new_k.size(), rng_));
  step.new_v.Upload(RandomFloats(b.new_v.size(), rng_));
  ASSERT_TRUE(graph->Replay());
  Sync();
  const std::vector<float> y_graph = step.y.ToHost();
  const std::vector<int32_t> ids_graph = step.ids.ToHost();
  ASSERT_TRUE(graph->Replay());
  Sync();
  EXPECT_EQ(step.y.ToHost(), y_graph);
  step.Run(gpu_.get());
  Sync();
  ExpectNear(step.y.ToHost(), y_graph, 1e-6f);
  EXPECT_EQ(step.ids.ToHost(), ids_graph);
  EXPECT_NE(y_graph, y_a);
}

TEST_F(CudaKernelsTest, FailedCaptureReturnsNullAndLeavesBackendUsable) {
  const std::vector<float> x = RandomFloats(4 * 64, rng_), w = RandomFloats(32 * 64, rng_);
  DeviceBuffer<float> d_x(x), d_w(w), d_y(std::vector<float>(4 * 32));
  const LinearParams linear{d_x.get(), d_w.get(), nullptr, d_y.get(), 4, 64, 32};
  // Synchronize waits, which a capture cannot record.
  std::unique_ptr<Graph> graph = gpu_->Capture([&] {
    gpu_->Linear(linear);
    gpu_->Synchronize();
  });
  EXPECT_EQ(graph, nullptr);
  gpu_->Linear(linear);
  Sync();
  std::vector<float> want(4 * 32);
  cpu::Linear({x.data(), w.data(), nullptr, want.data(), 4, 64, 32});
  ExpectNear(d_y.ToHost(), want, 1e-4f);
  // And a later capture works.
  EXPECT_NE(gpu_->Capture([&] { gpu_->Linear(linear); }), nullptr);
}

}  // namespace
}  // namespace kvserve::kernels
