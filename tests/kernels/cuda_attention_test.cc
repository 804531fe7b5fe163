// CudaBackend::WriteKv and PagedAttention against the CPU backend on random paged batches:
// every KV cache type (f32, bf16, f16; both backends read the same stored bits, so outputs agree
// to fp32 summation order: tolerance 1e-4 x (1 + |out|)), block sizes 16 and 32, head_dim 64 and
// 128 (80 and 96 once), GQA groups 1, 4, 8 (3 and 16 once); batches mixing decodes with prefill
// chunks over cached prefixes and padding tokens (slot -1), and long decodes that split the KV
// (run with no workspace, i.e. one split, and with the planned workspace).
// Skips where no CUDA device is present; ctest label gpu.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::AttentionInputs;
using testing::AttentionSizes;
using testing::DeviceBuffer;
using testing::ExpectNear;
using testing::MakeAttentionParams;
using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::SeqSpec;
using testing::SizesOf;
using testing::StoreAs;

struct AttentionConfig {
  int head_dim;
  int block_size;
  int group;
  DType dtype;
};

// Writes the batch's K/V on both backends (the caches must agree bit for bit), then runs
// attention on both; the GPU once without workspace (one split) and once with the planned one.
void ExpectAttentionMatchesCpu(cuda::CudaBackend* gpu, const std::vector<SeqSpec>& seqs,
                               const AttentionConfig& config, std::mt19937& rng) {
  const int kv_heads = 2;
  const PagedBatch b = MakePagedBatch(seqs, kv_heads * config.group, kv_heads, config.head_dim,
                                      config.block_size, 3, rng);
  std::vector<uint8_t> k_cache = StoreAs(b.k_cache, config.dtype);
  std::vector<uint8_t> v_cache = StoreAs(b.v_cache, config.dtype);
  DeviceBuffer<uint8_t> d_k_cache(k_cache), d_v_cache(v_cache);
  DeviceBuffer<float> d_new_k(b.new_k), d_new_v(b.new_v), d_q(b.q);
  DeviceBuffer<int32_t> d_slots(b.slot_mapping), d_query_start(b.query_start),
      d_context(b.context_lens), d_tables(b.block_tables);
  const float fill = -3.0f;  // padding rows keep it on both backends
  std::vector<float> out(b.q.size(), fill);
  DeviceBuffer<float> d_out(out);

  const PagedKvView view{k_cache.data(), v_cache.data(), b.num_blocks, kv_heads,
                         b.block_size,   b.head_dim,     config.dtype};
  cpu::WriteKv({b.new_k.data(), b.new_v.data(), b.slot_mapping.data(), b.num_tokens, 0, 0, view});
  const PagedKvView d_view{d_k_cache.get(), d_v_cache.get(), b.num_blocks, kv_heads,
                           b.block_size,    b.head_dim,      config.dtype};
  gpu->WriteKv({d_new_k.get(), d_new_v.get(), d_slots.get(), b.num_tokens, 0, 0, d_view});
  ASSERT_TRUE(gpu->Synchronize());
  ASSERT_TRUE(d_k_cache.ToHost() == k_cache);
  ASSERT_TRUE(d_v_cache.ToHost() == v_cache);

  const AttentionShape shape{b.num_tokens,      static_cast<int32_t>(seqs.size()),
                             b.max_context_len, b.num_heads,
                             kv_heads,          b.head_dim,
                             b.block_size};
  cpu::ThreadPool pool(2);
  std::vector<char> cpu_ws(cpu::AttentionWorkspaceBytes(shape, 2));
  cpu::PagedAttention(MakeAttentionParams(b, view, out.data(), cpu_ws.data(), cpu_ws.size()),
                      &pool);

  const size_t planned = gpu->AttentionWorkspaceBytes(shape);
  DeviceBuffer<uint8_t> gpu_ws{std::vector<uint8_t>(planned)};
  std::printf("%s head_dim %d block %d group %d: workspace bytes 0 and %zu\n",
              DTypeName(config.dtype), b.head_dim, b.block_size, config.group, planned);
  const AttentionInputs d_in{d_q.get(), d_query_start.get(), d_context.get(), d_tables.get()};
  for (size_t ws : {size_t{0}, planned}) {
    SCOPED_TRACE(::testing::Message() << "workspace bytes " << ws);
    d_out.Upload(std::vector<float>(out.size(), fill));
    gpu->PagedAttention(
        MakeAttentionParams(d_in, SizesOf(b), d_view, d_out.get(), gpu_ws.get(), ws));
    ASSERT_TRUE(gpu->Synchronize());
    ExpectNear(d_out.ToHost(), out, 1e-4f);
  }
}

// Decodes at positions 0 and just past a block, a whole prompt as one chunk, chunks over cached
// prefixes (several query tiles for 130), the two-token minimum of the prefill kernel, a long
// decode, a sequence with no query this step, and 3 padding tokens after the batch.
std::vector<SeqSpec> MixedBatch(int block_size) {
  return {{1, 1}, {block_size + 1, 1}, {37, 37}, {70, 20}, {3000, 1}, {5, 0}, {200, 130}, {50, 2}};
}

// Long decodes (split-KV) next to a long prefill chunk over a cached prefix.
std::vector<SeqSpec> LongBatch(int block_size) {
  return {{8200, 1}, {4099, 1}, {1000, 1}, {2 * block_size, 1}, {2300, 300}};
}

using AttentionCase = std::tuple<int /*head_dim*/, int /*block_size*/, int /*group*/, DType>;

class CudaAttentionTest : public testing::CudaTest,
                          public ::testing::WithParamInterface<AttentionCase> {
 protected:
  AttentionConfig config() const {
    const auto [head_dim, block_size, group, dtype] = GetParam();
    return {head_dim, block_size, group, dtype};
  }
};

TEST_P(CudaAttentionTest, MixedPrefillDecodeBatchWithPaddingMatchesCpu) {
  ExpectAttentionMatchesCpu(gpu_.get(), MixedBatch(config().block_size), config(), rng_);
}

TEST_P(CudaAttentionTest, LongDecodesUseSplitKvAndMatchCpu) {
  ExpectAttentionMatchesCpu(gpu_.get(), LongBatch(config().block_size), config(), rng_);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttentionTest,
                         ::testing::Combine(::testing::Values(64, 128), ::testing::Values(16, 32),
                                            ::testing::Values(1, 4, 8),
                                            ::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16)),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           // A stream, not string operator+: GCC 12 -O3 flags that with a false
                           // -Wrestrict.
                           std::ostringstream name;
                           name << "d" << std::get<0>(info.param) << "_block"
                                << std::get<1>(info.param) << "_group" << std::get<2>(info.param)
                                << "_" << DTypeName(std::get<3>(info.param));
                           return name.str();
                         });

using CudaAttentionShapesTest = testing::CudaTest;

// The other head sizes the dispatch instantiates, groups that do not fill the prefill tile
// (3: 21 tokens x 3 heads = 63 of 64 rows) or exceed a block's heads (16: two blocks per KV head),
// and blocks of 8 keys, smaller than a decode step (16 keys for bf16 x 128 dims with 4 heads, 16
// for f32 x 64 with 2), so a step spans blocks.
TEST_F(CudaAttentionShapesTest, OtherHeadDimsAndUnevenGroupsMatchCpu) {
  for (const AttentionConfig& config :
       {AttentionConfig{80, 16, 4, DType::kBF16}, AttentionConfig{96, 16, 4, DType::kF16},
        AttentionConfig{128, 8, 4, DType::kBF16}, AttentionConfig{64, 8, 2, DType::kF32},
        AttentionConfig{128, 16, 3, DType::kBF16}, AttentionConfig{64, 32, 16, DType::kF32}}) {
    SCOPED_TRACE(::testing::Message()
                 << "head_dim " << config.head_dim << " group " << config.group);
    ExpectAttentionMatchesCpu(gpu_.get(), MixedBatch(config.block_size), config, rng_);
    ExpectAttentionMatchesCpu(gpu_.get(), LongBatch(config.block_size), config, rng_);
  }
}

TEST_F(CudaAttentionShapesTest, UnsupportedHeadDimIsAReportedError) {
  std::vector<int32_t> zeros(4, 0);
  DeviceBuffer<int32_t> d_meta(zeros);
  DeviceBuffer<float> d_buf(std::vector<float>(4 * 48));
  const AttentionInputs in{d_buf.get(), d_meta.get(), d_meta.get(), d_meta.get()};
  const AttentionSizes one{.num_tokens = 1,
                           .num_seqs = 1,
                           .num_heads = 1,
                           .max_blocks_per_seq = 1,
                           .max_query_len = 1,
                           .max_context_len = 1};
  const PagedKvView head_dim_48{d_buf.get(), d_buf.get(), 1, 1, 1, 48, DType::kF32};
  gpu_->PagedAttention(MakeAttentionParams(in, one, head_dim_48, d_buf.get(), nullptr, 0));
  EXPECT_FALSE(gpu_->Synchronize());
}

}  // namespace
}  // namespace kvserve::kernels
