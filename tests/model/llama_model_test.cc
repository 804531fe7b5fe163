// LlamaModel's contract besides fidelity (cache_fidelity_test.cc): argument validation, the
// batch builder's slots, padding, rows without logits, and that Forward allocates nothing.
#include "model/llama_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/weights_loader.h"
#include "tests/model/llama_model_test_util.h"
#include "tests/status_matchers.h"

// Counts every operator new in this binary, to pin "Forward allocates nothing". The replacement
// pair is malloc/free; GCC cannot see that operator new and delete are both replaced here and
// warns about the mismatch after inlining, hence the pragma.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;
using testing::RelativeError;

class LlamaModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = LoadWeights("synthetic:tiny:seed=3");
    KVSERVE_ASSERT_OK(loaded);
    weights_ = std::move(loaded).value();
    device_weights_ = testing::UploadToCpu(weights_);
    ASSERT_NE(device_weights_, nullptr);
    auto model = LlamaModel::Create(device_weights_.get(), limits_, kBlockSize);
    KVSERVE_ASSERT_OK(model);
    model_ = std::move(model).value();
    pool_ = KvPool::Create(model_->kv_layout(), 16, model_->backend()).value();
  }

  static constexpr int32_t kBlockSize = 8;
  ForwardLimits limits_{
      .max_num_tokens = 32, .max_num_seqs = 4, .max_context_len = 64, .max_logit_rows = 32};
  ModelWeights weights_;
  std::unique_ptr<DeviceWeights> device_weights_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvPool> pool_;
};

TEST(ForwardBatchBuilderTest, SlotsFollowTheBlockTable) {
  ForwardBatchBuilder builder(/*block_size=*/4, /*max_blocks_per_seq=*/3, 16, 2);
  const std::vector<int32_t> table_a = {7, 2};
  const std::vector<int32_t> table_b = {5, 9, 1};
  KVSERVE_ASSERT_OK(builder.AddSequence({10, 11, 12}, 2, table_a, LogitsFor::kLast));
  KVSERVE_ASSERT_OK(builder.AddSequence({20}, 9, table_b, LogitsFor::kAll));
  const ForwardBatch b = builder.View();
  EXPECT_EQ(std::vector<int32_t>(b.positions.begin(), b.positions.end()),
            (std::vector<int32_t>{2, 3, 4, 9}));
  // position 2, 3 -> block 7 offsets 2, 3; position 4 -> block 2 offset 0; 9 -> block 1 offset 1
  EXPECT_EQ(std::vector<int32_t>(b.slot_mapping.begin(), b.slot_mapping.end()),
            (std::vector<int32_t>{30, 31, 8, 5}));
  EXPECT_EQ(std::vector<int32_t>(b.query_start.begin(), b.query_start.end()),
            (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(std::vector<int32_t>(b.context_lens.begin(), b.context_lens.end()),
            (std::vector<int32_t>{5, 10}));
  EXPECT_EQ(std::vector<int32_t>(b.block_tables.begin(), b.block_tables.end()),
            (std::vector<int32_t>{7, 2, 0, 5, 9, 1}));
  EXPECT_EQ(std::vector<int32_t>(b.logit_rows.begin(), b.logit_rows.end()),
            (std::vector<int32_t>{2, 3}));
}

TEST(ForwardBatchBuilderTest, RejectsBlockTableThatDoesNotCoverTheTokens) {
  ForwardBatchBuilder builder(4, 3, 16, 2);
  const std::vector<int32_t> table = {3};
  EXPECT_FALSE(builder.AddSequence({1, 2}, 3, table, LogitsFor::kLast).ok());
  KVSERVE_EXPECT_OK(builder.AddSequence({1}, 3, table, LogitsFor::kLast));
}

TEST_F(LlamaModelTest, CreateRejectsBadLimitsAndBlockSize) {
  ForwardLimits bad = limits_;
  bad.max_num_tokens = 0;
  EXPECT_THAT(LlamaModel::Create(device_weights_.get(), bad, 8),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LlamaModel::Create(device_weights_.get(), limits_, 12),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A rank's shard runs only with its group's communicator (tensor_parallel_forward_test runs it),
// and lays out a KV pool of its own KV heads.
TEST(LlamaModelShardTest, ShardedWeightsWantTheirGroupsCommunicator) {
  auto shard = LoadWeights("synthetic:tiny-tp:seed=3", {.tensor_parallel = {.rank = 1, .size = 2}});
  KVSERVE_ASSERT_OK(shard);
  auto weights = testing::UploadToCpu(*shard);
  ASSERT_NE(weights, nullptr);
  EXPECT_EQ(weights->shard().num_heads, 4);
  EXPECT_EQ(weights->shard().num_kv_heads, 2);
  const absl::Status s = LlamaModel::Create(weights.get(), {}, 8).status();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          HasSubstr("tensor-parallel rank 1 of 2, and no communicator was given")));
}

TEST_F(LlamaModelTest, ForwardRejectsInconsistentBatches) {
  const std::vector<int32_t> table = {1, 2};
  ForwardBatchBuilder builder(kBlockSize, 2, 64, 8);
  std::vector<int32_t> too_many(33, 1);
  std::vector<int32_t> long_table = {1, 2, 3, 4, 5};
  ForwardBatchBuilder big(kBlockSize, 5, 64, 8);
  KVSERVE_ASSERT_OK(big.AddSequence(too_many, 0, long_table, LogitsFor::kLast));
  EXPECT_THAT(model_->Forward(big.View(), *pool_), StatusIs(absl::StatusCode::kInvalidArgument));

  KVSERVE_ASSERT_OK(builder.AddSequence({weights_.config.vocab_size}, 0, table, LogitsFor::kLast));
  EXPECT_THAT(model_->Forward(builder.View(), *pool_),
              StatusIs(absl::StatusCode::kInvalidArgument));

  builder.Clear();
  KVSERVE_ASSERT_OK(builder.AddSequence({1, 2}, 0, table, LogitsFor::kLast));
  ForwardBatch b = builder.View();
  const std::vector<int32_t> bad_start = {0, 5};
  b.query_start = bad_start;
  EXPECT_THAT(model_->Forward(b, *pool_), StatusIs(absl::StatusCode::kInvalidArgument));

  // A block id outside the 16-block pool would write out of bounds.
  const std::vector<int32_t> outside = {16};
  builder.Clear();
  KVSERVE_ASSERT_OK(builder.AddSequence({1, 2}, 0, outside, LogitsFor::kLast));
  EXPECT_THAT(model_->Forward(builder.View(), *pool_),
              StatusIs(absl::StatusCode::kInvalidArgument));

  builder.Clear();
  KVSERVE_ASSERT_OK(builder.AddSequence({1, 2}, 0, table, LogitsFor::kLast));
  KvLayout other = model_->kv_layout();
  other.block_size = 16;
  auto other_pool = KvPool::Create(other, 4, model_->backend()).value();
  EXPECT_THAT(model_->Forward(builder.View(), *other_pool),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(LlamaModelTest, PaddingTokensWriteNothingAndChangeNoLogits) {
  const std::vector<int32_t> table = {3, 6};
  const std::vector<int32_t> tokens = {5, 17, 42, 9, 100};
  ForwardBatchBuilder builder(kBlockSize, 2, 32, 4);
  KVSERVE_ASSERT_OK(builder.AddSequence(tokens, 0, table, LogitsFor::kAll));
  auto plain = model_->Forward(builder.View(), *pool_);
  KVSERVE_ASSERT_OK(plain);
  const std::vector<float> want(plain->begin(), plain->end());

  // The same sequence followed by two padding tokens (slot -1, outside every sequence).
  const ForwardBatch b = builder.View();
  std::vector<int32_t> ids(b.token_ids.begin(), b.token_ids.end());
  std::vector<int32_t> positions(b.positions.begin(), b.positions.end());
  std::vector<int32_t> slots(b.slot_mapping.begin(), b.slot_mapping.end());
  ids.insert(ids.end(), {1, 1});
  positions.insert(positions.end(), {0, 0});
  slots.insert(slots.end(), {-1, -1});
  ForwardBatch padded = b;
  padded.token_ids = ids;
  padded.positions = positions;
  padded.slot_mapping = slots;
  testing::PoisonPool(*pool_);
  auto got = model_->Forward(padded, *pool_);
  KVSERVE_ASSERT_OK(got);
  EXPECT_EQ(RelativeError(*got, want), 0.0);
  // Block 0 (the null block) was not touched: it is still NaN.
  EXPECT_TRUE(std::isnan(static_cast<float*>(pool_->Layer(0).k)[0]));
}

TEST_F(LlamaModelTest, NoLogitRowsReturnsEmptyButFillsTheCache) {
  const std::vector<int32_t> table = {2};
  ForwardBatchBuilder builder(kBlockSize, 1, 32, 4);
  KVSERVE_ASSERT_OK(builder.AddSequence({4, 5, 6}, 0, table, LogitsFor::kNone));
  testing::PoisonPool(*pool_);
  auto logits = model_->Forward(builder.View(), *pool_);
  KVSERVE_ASSERT_OK(logits);
  EXPECT_TRUE(logits->empty());
  const kernels::PagedKvView layer0 = pool_->Layer(0);
  const int64_t block_elements = pool_->layout().elements_per_block_per_pool();
  EXPECT_FALSE(std::isnan(
      static_cast<const float*>(layer0.k)[2 * block_elements]));  // block 2, head 0, offset 0
}

TEST_F(LlamaModelTest, ForwardAllocatesNothing) {
  const std::vector<int32_t> table_a = {1, 2, 3};
  const std::vector<int32_t> table_b = {4, 5};
  ForwardBatchBuilder builder(kBlockSize, 3, 32, 4);
  std::vector<int32_t> prompt(20);
  std::iota(prompt.begin(), prompt.end(), 3);
  KVSERVE_ASSERT_OK(builder.AddSequence(prompt, 0, table_a, LogitsFor::kLast));
  KVSERVE_ASSERT_OK(builder.AddSequence({7}, 10, table_b, LogitsFor::kLast));
  KVSERVE_ASSERT_OK(model_->Forward(builder.View(), *pool_));  // warm-up
  const int64_t before = g_allocations.load();
  auto logits = model_->Forward(builder.View(), *pool_);
  const int64_t after = g_allocations.load();
  KVSERVE_ASSERT_OK(logits);
  EXPECT_EQ(after - before, 0);
  EXPECT_EQ(logits->size(), 2u * weights_.config.vocab_size);
}

}  // namespace
}  // namespace kvserve
