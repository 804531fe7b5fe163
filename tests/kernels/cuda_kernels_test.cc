// Each CUDA kernel against the CPU one on the same random inputs. Skips (GTEST_SKIP) where no
// CUDA device is present; ctest label gpu.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::RandomFloats;
using testing::SeqSpec;

// A device copy of a host vector; frees on destruction.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), std::max<size_t>(1, size_) * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t size_;
};

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1.0f + std::fabs(want[i]))) << "element " << i;
  }
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    std::string error;
    gpu_ = cuda::CudaBackend::Create(nullptr, &error);
    ASSERT_NE(gpu_, nullptr) << error;
    std::printf("seed %u\n", kSeed);
  }
  void Sync() { ASSERT_TRUE(gpu_->Synchronize()); }

  static constexpr uint32_t kSeed = 777;
  std::mt19937 rng_{kSeed};
  std::unique_ptr<cuda::CudaBackend> gpu_;
};

TEST_F(CudaKernelsTest, EmbeddingMatchesCpu) {
  const int vocab = 1000, hidden = 72, tokens = 37;
  const std::vector<float> table = RandomFloats(vocab * hidden, rng_);
  std::vector<int32_t> ids(tokens);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng_() % vocab);
  std::vector<float> want(tokens * hidden);
  cpu::Embedding({ids.data(), table.data(), want.data(), tokens, vocab, hidden});
  DeviceBuffer<float> d_table(table), d_out(std::vector<float>(want.size()));
  DeviceBuffer<int32_t> d_ids(ids);
  gpu_->Embedding({d_ids.get(), d_table.get(), d_out.get(), tokens, vocab, hidden});
  Sync();
  EXPECT_EQ(d_out.ToHost(), want);
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

TEST_F(CudaKernelsTest, LinearMatchesCpu) {
  const int tokens = 37, in = 576, out = 1536;
  const std::vector<float> x = RandomFloats(tokens * in, rng_);
  const std::vector<float> w = RandomFloats(out * in, rng_);
  const std::vector<float> bias = RandomFloats(out, rng_);
  std::vector<float> want(tokens * out);
  cpu::Linear({x.data(), w.data(), bias.data(), want.data(), tokens, in, out});
  DeviceBuffer<float> d_x(x), d_w(w), d_bias(bias), d_y(want);
  gpu_->Linear({d_x.get(), d_w.get(), d_bias.get(), d_y.get(), tokens, in, out});
  Sync();
  ExpectNear(d_y.ToHost(), want, 1e-4f);
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

using AttentionCase = std::tuple<int /*head_dim*/, int /*block_size*/, int /*group*/>;

class CudaAttentionTest : public CudaKernelsTest,
                          public ::testing::WithParamInterface<AttentionCase> {};

// Writes the batch's K/V and runs attention on both backends; the GPU with no workspace (one
// split), the planned workspace, and room for every token to split.
void ExpectAttentionMatchesCpu(cuda::CudaBackend* gpu, const std::vector<SeqSpec>& seqs,
                               int head_dim, int block_size, int group, std::mt19937& rng) {
  const int kv_heads = 2;
  PagedBatch b = MakePagedBatch(seqs, kv_heads * group, kv_heads, head_dim, block_size, 3, rng);
  DeviceBuffer<float> d_k_cache(b.k_cache), d_v_cache(b.v_cache), d_new_k(b.new_k),
      d_new_v(b.new_v), d_q(b.q);
  DeviceBuffer<int32_t> d_slots(b.slot_mapping), d_query_start(b.query_start),
      d_context(b.context_lens), d_tables(b.block_tables);
  const float fill = -3.0f;
  std::vector<float> out(b.q.size(), fill);
  DeviceBuffer<float> d_out(out);

  PagedKvView view{b.k_cache.data(), b.v_cache.data(), b.num_blocks,
                   kv_heads,         block_size,       head_dim};
  cpu::WriteKv({b.new_k.data(), b.new_v.data(), b.slot_mapping.data(), b.num_tokens, 0, 0, view});
  PagedKvView d_view{d_k_cache.get(), d_v_cache.get(), b.num_blocks,
                     kv_heads,        block_size,      head_dim};
  gpu->WriteKv({d_new_k.get(), d_new_v.get(), d_slots.get(), b.num_tokens, 0, 0, d_view});
  ASSERT_TRUE(gpu->Synchronize());
  ASSERT_EQ(d_k_cache.ToHost(), b.k_cache);
  ASSERT_EQ(d_v_cache.ToHost(), b.v_cache);

  const AttentionShape shape{b.num_tokens,      static_cast<int32_t>(seqs.size()),
                             b.max_context_len, b.num_heads,
                             kv_heads,          head_dim,
                             block_size};
  cpu::ThreadPool pool(2);
  std::vector<char> cpu_ws(cpu::AttentionWorkspaceBytes(shape, 2));
  PagedAttentionParams p{};
  p.q = b.q.data();
  p.out = out.data();
  p.query_start = b.query_start.data();
  p.context_lens = b.context_lens.data();
  p.block_tables = b.block_tables.data();
  p.num_tokens = b.num_tokens;
  p.num_seqs = static_cast<int32_t>(seqs.size());
  p.num_heads = b.num_heads;
  p.max_blocks_per_seq = b.max_blocks_per_seq;
  p.max_query_len = b.max_query_len;
  p.max_context_len = b.max_context_len;
  p.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  p.cache = view;
  p.workspace = cpu_ws.data();
  p.workspace_bytes = cpu_ws.size();
  cpu::PagedAttention(p, &pool);

  // Enough workspace for every token to split (more than planned for max_num_seqs).
  const size_t gpu_ws_bytes =
      gpu->AttentionWorkspaceBytes(shape) * (b.num_tokens / seqs.size() + 1);
  void* gpu_ws = nullptr;
  ASSERT_EQ(cudaMalloc(&gpu_ws, std::max<size_t>(gpu_ws_bytes, 1)), cudaSuccess);
  std::printf("head_dim %d block %d group %d: workspace bytes 0, %zu, %zu\n", head_dim, block_size,
              group, gpu->AttentionWorkspaceBytes(shape), gpu_ws_bytes);
  PagedAttentionParams dp = p;
  dp.q = d_q.get();
  dp.out = d_out.get();
  dp.query_start = d_query_start.get();
  dp.context_lens = d_context.get();
  dp.block_tables = d_tables.get();
  dp.cache = d_view;
  for (size_t ws : {size_t{0}, gpu->AttentionWorkspaceBytes(shape), gpu_ws_bytes}) {
    dp.workspace = gpu_ws;
    dp.workspace_bytes = ws;  // no splits, planned splits, splits for every token
    gpu->PagedAttention(dp);
    ASSERT_TRUE(gpu->Synchronize());
    ExpectNear(d_out.ToHost(), out, 1e-4f);
  }
  cudaFree(gpu_ws);
}

TEST_P(CudaAttentionTest, MixedPrefillDecodeBatchWithPaddingMatchesCpu) {
  const auto [head_dim, block_size, group] = GetParam();
  ExpectAttentionMatchesCpu(gpu_.get(),
                            {{1, 1}, {block_size + 1, 1}, {37, 37}, {70, 20}, {3000, 1}, {5, 0}},
                            head_dim, block_size, group, rng_);
}

TEST_P(CudaAttentionTest, LongDecodesUseSplitKvAndMatchCpu) {
  const auto [head_dim, block_size, group] = GetParam();
  ExpectAttentionMatchesCpu(gpu_.get(), {{4099, 1}, {1000, 1}, {2 * block_size, 1}}, head_dim,
                            block_size, group, rng_);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         ::testing::Combine(::testing::Values(64, 80, 128),
                                            ::testing::Values(8, 16, 32),
                                            ::testing::Values(1, 3, 4, 16)));

}  // namespace
}  // namespace kvserve::kernels
