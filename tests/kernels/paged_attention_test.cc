// Paged attention (and the KV write that precedes it) against naive attention over the plain
// K/V history: mixed prefill + decode batches with padding, contexts crossing block
// boundaries, head_dim 64/80/128, block sizes 8/16/32, GQA ratios 1/3/4, on every instruction
// set the machine has (AVX-512 and AVX2 chunk updates, the portable row update).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::AttentionInputs;
using testing::AttentionSizes;
using testing::MakeAttentionParams;
using testing::MakePagedBatch;
using testing::PagedBatch;
using testing::ReferenceAttention;
using testing::SeqSpec;

// Writes the batch's new K/V, runs attention on pool, returns out [num_tokens, heads, d].
std::vector<float> RunCpuAttention(PagedBatch& b, cpu::ThreadPool* pool, float out_fill) {
  PagedKvView view{b.k_cache.data(), b.v_cache.data(), b.num_blocks,
                   b.num_kv_heads,   b.block_size,     b.head_dim};
  cpu::WriteKv({b.new_k.data(), b.new_v.data(), b.slot_mapping.data(), b.num_tokens, 0, 0, view});
  const AttentionShape shape{b.num_tokens,      static_cast<int32_t>(b.seqs.size()),
                             b.max_context_len, b.num_heads,
                             b.num_kv_heads,    b.head_dim,
                             b.block_size};
  std::vector<char> workspace(cpu::AttentionWorkspaceBytes(shape, pool ? pool->num_threads() : 1));
  std::vector<float> out(static_cast<size_t>(b.num_tokens) * b.num_heads * b.head_dim, out_fill);
  cpu::PagedAttention(MakeAttentionParams(b, view, out.data(), workspace.data(), workspace.size()),
                      pool);
  return out;
}

void ExpectMatchesReference(const PagedBatch& b, const std::vector<float>& out, float out_fill) {
  const std::vector<float> want = ReferenceAttention(b, 1.0f / std::sqrt(float(b.head_dim)));
  const int64_t row = static_cast<int64_t>(b.num_heads) * b.head_dim;
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    if (i / row >= b.query_start.back()) {
      ASSERT_EQ(out[i], out_fill) << "padding token " << i / row << " was written";
    } else {
      ASSERT_NEAR(out[i], want[i], 2e-5) << "token " << i / row << " element " << i % row;
    }
  }
}

// Every instruction set this machine has (the AVX-512 and AVX2 chunk updates, the portable row
// update); each test resets the cap when done.
std::vector<cpu::CpuIsa> MachineIsas() {
  std::vector<cpu::CpuIsa> isas;
  for (cpu::CpuIsa isa : {cpu::CpuIsa::kScalar, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512}) {
    if (isa <= cpu::DetectedCpuIsa()) isas.push_back(isa);
  }
  return isas;
}

using AttentionCase = std::tuple<int /*head_dim*/, int /*block_size*/, int /*group*/>;

class PagedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(PagedAttentionTest, MixedPrefillAndDecodeBatchMatchesNaive) {
  const auto [head_dim, block_size, group] = GetParam();
  const uint32_t seed = 1000 + head_dim * 100 + block_size * 10 + group;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const int kv_heads = 3;
  // A first-token decode, decodes crossing block boundaries, a whole prompt (37 tokens: more
  // than two 16-token query tiles), a later prefill chunk, an empty slot in the batch.
  const std::vector<SeqSpec> seqs = {{1, 1}, {block_size + 1, 1}, {37, 37}, {70, 20}, {100, 1},
                                     {5, 0}, {2 * block_size, 1}};
  PagedBatch b = MakePagedBatch(seqs, kv_heads * group, kv_heads, head_dim, block_size,
                                /*num_padding=*/3, rng);
  cpu::ThreadPool pool(2);
  for (cpu::CpuIsa isa : MachineIsas()) {
    SCOPED_TRACE(cpu::CpuIsaName(isa));
    cpu::SetCpuIsaCapForTesting(isa);
    const std::vector<float> out = RunCpuAttention(b, &pool, -7.0f);
    ExpectMatchesReference(b, out, -7.0f);
  }
  cpu::SetCpuIsaCapForTesting(cpu::CpuIsa::kAvx512);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Combine(::testing::Values(64, 80, 128),
                                            ::testing::Values(8, 16, 32),
                                            ::testing::Values(1, 3, 4)));

TEST(PagedAttentionSingleTest, OneDecodeTokenOverALongContext) {
  std::mt19937 rng(42);
  std::printf("seed 42\n");
  PagedBatch b = MakePagedBatch({{1000, 1}}, 9, 3, 64, 16, 0, rng);
  const std::vector<float> out = RunCpuAttention(b, nullptr, 0.0f);
  ExpectMatchesReference(b, out, 0.0f);
}

TEST(PagedAttentionSingleTest, ResultDoesNotDependOnThreadCount) {
  std::mt19937 rng(43);
  std::printf("seed 43\n");
  PagedBatch b = MakePagedBatch({{300, 40}, {64, 1}, {17, 1}}, 12, 4, 128, 16, 2, rng);
  PagedBatch b2 = b;
  cpu::ThreadPool pool(2);
  const std::vector<float> one = RunCpuAttention(b, nullptr, 0.0f);
  const std::vector<float> two = RunCpuAttention(b2, &pool, 0.0f);
  EXPECT_EQ(one, two);
}

// A token's attention is the same bits whether it comes in a prompt's prefill (in 16-token query
// tiles beside other tokens) or alone as a decode over the same cache: a request moved to another
// worker re-prefills the tokens it had decoded, and must continue token for token.
TEST(PagedAttentionSingleTest, PrefillAndDecodeOfATokenAgreeBitForBit) {
  for (const cpu::CpuIsa isa : MachineIsas()) {
    cpu::SetCpuIsaCapForTesting(isa);
    std::printf("isa %s\n", cpu::CpuIsaName(isa));
    // GQA groups of 3 and 5: a prompt's tiles are 48 and 80 query rows, its last tile 6 and 10,
    // so rows go together, alone, and in both at once (the AVX2 path takes 8 or more together).
    const std::tuple<int, int, int> shapes[] = {{8, 9, 3}, {16, 9, 3}, {32, 9, 3}, {16, 10, 2}};
    for (const auto& [block_size, heads, kv_heads] : shapes) {
      std::mt19937 rng(45 + block_size + heads);
      std::printf("seed %d\n", 45 + block_size + heads);
      const int head_dim = 64, len = 50;
      PagedBatch b = MakePagedBatch({{len, len}}, heads, kv_heads, head_dim, block_size, 0, rng);
      const std::vector<float> prefill = RunCpuAttention(b, nullptr, 0.0f);  // writes the cache
      const AttentionShape shape{1, 1, len, heads, kv_heads, head_dim, block_size};
      std::vector<char> workspace(cpu::AttentionWorkspaceBytes(shape, 1));
      const int64_t row = int64_t{heads} * head_dim;
      const PagedKvView view{b.k_cache.data(), b.v_cache.data(), b.num_blocks,
                             kv_heads,         block_size,       head_dim};
      for (int i = 0; i < len; ++i) {
        const int32_t query_start[2] = {0, 1};
        const int32_t context_len = i + 1;
        std::vector<float> out(row);
        // Token i alone: one sequence of one query token over the first i + 1 positions.
        const AttentionInputs in{b.q.data() + i * row, query_start, &context_len,
                                 b.block_tables.data()};
        const AttentionSizes sizes{.num_tokens = 1,
                                   .num_seqs = 1,
                                   .num_heads = heads,
                                   .max_blocks_per_seq = b.max_blocks_per_seq,
                                   .max_query_len = 1,
                                   .max_context_len = len};
        cpu::PagedAttention(
            MakeAttentionParams(in, sizes, view, out.data(), workspace.data(), workspace.size()),
            nullptr);
        ASSERT_EQ(out,
                  std::vector<float>(prefill.begin() + i * row, prefill.begin() + (i + 1) * row))
            << "token " << i << ", block size " << block_size << ", " << cpu::CpuIsaName(isa);
      }
    }
  }
  cpu::SetCpuIsaCapForTesting(cpu::CpuIsa::kAvx512);
}

TEST(PagedAttentionSingleTest, LargeScoresStayFinite) {
  // Scores in the hundreds would overflow a naive exp; the online softmax must not.
  std::mt19937 rng(44);
  std::printf("seed 44\n");
  PagedBatch b = MakePagedBatch({{80, 8}}, 4, 1, 64, 8, 0, rng);
  for (float& x : b.q) x *= 60.0f;
  for (const cpu::CpuIsa isa : MachineIsas()) {
    SCOPED_TRACE(cpu::CpuIsaName(isa));
    cpu::SetCpuIsaCapForTesting(isa);
    PagedBatch fresh = b;
    const std::vector<float> out = RunCpuAttention(fresh, nullptr, 0.0f);
    for (float x : out) ASSERT_TRUE(std::isfinite(x));
    ExpectMatchesReference(fresh, out, 0.0f);
  }
  cpu::SetCpuIsaCapForTesting(cpu::CpuIsa::kAvx512);
}

TEST(PagedAttentionSingleTest, BackendInterfaceWorksWithOnePlanForSeveralBatches) {
  // One workspace planned for the engine limits serves batches of different shapes.
  cpu::CpuBackend cpu_backend(2);
  Backend* backend = &cpu_backend;
  const AttentionShape plan{
      /*max_num_tokens=*/64, /*max_num_seqs=*/8, /*max_context_len=*/512,
      /*num_heads=*/9,       /*num_kv_heads=*/3, /*head_dim=*/64,
      /*block_size=*/16};
  std::vector<char> workspace(backend->AttentionWorkspaceBytes(plan));
  std::mt19937 rng(45);
  std::printf("seed 45\n");
  const std::vector<std::vector<SeqSpec>> batches = {
      {{64, 64}},
      {{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 1}, {512, 1}},
      {{100, 50}, {17, 1}, {300, 13}}};
  for (const std::vector<SeqSpec>& seqs : batches) {
    PagedBatch b = MakePagedBatch(seqs, 9, 3, 64, 16, 0, rng);
    PagedKvView view{b.k_cache.data(), b.v_cache.data(), b.num_blocks, 3, 16, 64};
    backend->WriteKv(
        {b.new_k.data(), b.new_v.data(), b.slot_mapping.data(), b.num_tokens, 0, 0, view});
    std::vector<float> out(b.q.size(), 0.0f);
    backend->PagedAttention(
        MakeAttentionParams(b, view, out.data(), workspace.data(), workspace.size()));
    ASSERT_TRUE(backend->Synchronize());
    ExpectMatchesReference(b, out, 0.0f);
  }
}

}  // namespace
}  // namespace kvserve::kernels
