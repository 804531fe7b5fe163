// Helpers shared by the forward-pass tests (cache fidelity, reference, llama_model): a block
// allocator that hands out shuffled, non-contiguous block ids, a sequence's block table, the
// "full recompute" reference (the whole prefix as one fresh prefill) and the error measure.
#ifndef KVSERVE_TESTS_MODEL_LLAMA_MODEL_TEST_UTIL_H_
#define KVSERVE_TESTS_MODEL_LLAMA_MODEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/device_weights.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"
#include "tests/status_matchers.h"

namespace kvserve::testing {

// Hands out the block ids 1 .. num_blocks - 1 (0 is the null block) in a shuffled order.
class ShuffledBlocks {
 public:
  ShuffledBlocks(int32_t num_blocks, uint32_t seed) : free_(num_blocks - 1) {
    std::iota(free_.begin(), free_.end(), 1);
    std::mt19937 rng(seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
  int32_t Take() {
    EXPECT_FALSE(free_.empty()) << "test KV pool too small";
    const int32_t block = free_.back();
    free_.pop_back();
    return block;
  }

 private:
  std::vector<int32_t> free_;
};

// A sequence as a test drives it: its tokens, how many are in the cache, its block table.
struct PagedSequence {
  std::vector<int32_t> tokens;
  int32_t num_computed = 0;
  std::vector<int32_t> block_table;

  // Grows the block table to hold `num_tokens` positions.
  void Reserve(int32_t num_tokens, int32_t block_size, ShuffledBlocks& blocks) {
    while (static_cast<int32_t>(block_table.size()) * block_size < num_tokens) {
      block_table.push_back(blocks.Take());
    }
  }
};

// max_v |got - want| / max_v |want|: the error relative to the row's scale (a logit row's
// entries near zero make per-entry relative errors meaningless).
inline double RelativeError(absl::Span<const float> got, absl::Span<const float> want) {
  double max_diff = 0.0;
  double max_want = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_want = std::max(max_want, std::fabs(static_cast<double>(want[i])));
  }
  return max_want > 0.0 ? max_diff / max_want : max_diff;
}

// `weights` converted to `dtype` in the memory of a new CPU backend of `threads` threads.
inline std::unique_ptr<DeviceWeights> UploadToCpu(const ModelWeights& weights, int threads = 1,
                                                  kernels::DType dtype = kernels::DType::kF32) {
  auto uploaded =
      DeviceWeights::Upload(weights, std::make_shared<kernels::cpu::CpuBackend>(threads), dtype);
  KVSERVE_EXPECT_OK(uploaded);
  return uploaded.ok() ? *std::move(uploaded) : nullptr;
}

// Fills every K and V pool of `pool` with NaN (in its dtype), so that reading any slot that was
// not written in this test poisons the logits.
inline void PoisonPool(KvPool& pool) {
  const int64_t elements = pool.layout().elements_per_block_per_pool() * pool.num_blocks();
  const kernels::DType dtype = pool.Layer(0).dtype;
  std::vector<uint8_t> nans(kernels::RowBytes(dtype, elements));
  if (dtype == kernels::DType::kF32) {
    std::fill_n(reinterpret_cast<float*>(nans.data()), elements, std::nanf(""));
  } else {  // bf16 0x7FC0 and f16 0x7E00 are both quiet NaNs
    std::fill_n(reinterpret_cast<uint16_t*>(nans.data()), elements,
                dtype == kernels::DType::kBF16 ? 0x7FC0 : 0x7E00);
  }
  for (int32_t layer = 0; layer < pool.layout().num_layers; ++layer) {
    const kernels::PagedKvView view = pool.Layer(layer);
    pool.backend()->CopyToDevice(view.k, nans.data(), nans.size());
    pool.backend()->CopyToDevice(view.v, nans.data(), nans.size());
  }
}

// The full-recompute reference: logits [vocab] of the last token of `prefix`, computed by one
// prefill of the whole prefix into a fresh pool (blocks 1, 2, ... in order). No state survives
// between calls except the pool's memory, which the new prefill overwrites before reading.
inline std::vector<float> RecomputeLastLogits(LlamaModel& model, KvPool& scratch_pool,
                                              absl::Span<const int32_t> prefix) {
  const int32_t block_size = model.block_size();
  std::vector<int32_t> table((prefix.size() + block_size - 1) / block_size);
  std::iota(table.begin(), table.end(), 1);
  ForwardBatchBuilder builder(block_size, static_cast<int32_t>(table.size()),
                              static_cast<int32_t>(prefix.size()), 1);
  KVSERVE_EXPECT_OK(builder.AddSequence(prefix, 0, table, LogitsFor::kLast));
  auto logits = model.Forward(builder.View(), scratch_pool);
  KVSERVE_EXPECT_OK(logits);
  if (!logits.ok()) return {};
  return std::vector<float>(logits->begin(), logits->end());
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_MODEL_LLAMA_MODEL_TEST_UTIL_H_
