#include "kvcache/kv_layout.h"

#include <gtest/gtest.h>

#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::_;

// SmolLM2-135M: 30 layers, 3 KV heads, head_dim 64.
KvLayout SmolLm2(KvDtype dtype) {
  return KvLayout{
      .num_layers = 30, .num_kv_heads_local = 3, .block_size = 16, .head_dim = 64, .dtype = dtype};
}

TEST(KvLayoutTest, BytesPerBlockCoverEveryLayerKAndV) {
  const KvLayout layout = SmolLm2(KvDtype::kF16);
  KVSERVE_ASSERT_OK(layout.Validate());
  EXPECT_EQ(layout.elements_per_block_per_pool(), 3 * 16 * 64);
  EXPECT_EQ(layout.bytes_per_block_per_pool(), 3 * 16 * 64 * 2);
  EXPECT_EQ(layout.bytes_per_block(), 2 * 30 * 3 * 16 * 64 * 2);  // 368,640
  EXPECT_EQ(layout.pool_bytes(10), 10 * 3 * 16 * 64 * 2);
}

TEST(KvLayoutTest, DtypeSizes) {
  EXPECT_EQ(KvDtypeBytes(KvDtype::kF32), 4);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kF16), 2);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kBF16), 2);
  EXPECT_EQ(KvDtypeBytes(KvDtype::kFp8), 1);
  EXPECT_EQ(SmolLm2(KvDtype::kF32).bytes_per_block(),
            2 * SmolLm2(KvDtype::kBF16).bytes_per_block());
  EXPECT_EQ(SmolLm2(KvDtype::kFp8).bytes_per_block() * 2, SmolLm2(KvDtype::kF16).bytes_per_block());
  EXPECT_EQ(KvDtypeName(KvDtype::kBF16), "bf16");
}

TEST(KvLayoutTest, BlocksForBudgetRoundsDown) {
  const KvLayout layout = SmolLm2(KvDtype::kF16);
  EXPECT_EQ(layout.NumBlocksForBudget(int64_t{1} << 30), (int64_t{1} << 30) / 368640);
  EXPECT_EQ(layout.NumBlocksForBudget(368640), 1);
  EXPECT_EQ(layout.NumBlocksForBudget(368639), 0);
  EXPECT_EQ(layout.NumBlocksForBudget(-1), 0);
}

TEST(KvLayoutTest, ValidateNamesTheBadField) {
  KvLayout layout = SmolLm2(KvDtype::kF16);
  layout.num_layers = 0;
  EXPECT_THAT(layout.Validate(), StatusIs(_, HasSubstr("num_layers")));
  layout = SmolLm2(KvDtype::kF16);
  layout.num_kv_heads_local = -1;
  EXPECT_THAT(layout.Validate(), StatusIs(_, HasSubstr("num_kv_heads_local")));
  layout = SmolLm2(KvDtype::kF16);
  layout.head_dim = 0;
  EXPECT_THAT(layout.Validate(), StatusIs(_, HasSubstr("head_dim")));
  layout = SmolLm2(KvDtype::kF16);
  layout.block_size = 12;
  EXPECT_THAT(layout.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(KvLayoutTest, BlockSizesArePowersOfTwoUpTo256) {
  for (int size : {1, 2, 4, 8, 16, 32, 64, 128, 256}) KVSERVE_EXPECT_OK(ValidateBlockSize(size));
  for (int size : {0, -16, 3, 12, 24, 512}) {
    EXPECT_THAT(ValidateBlockSize(size), StatusIs(absl::StatusCode::kInvalidArgument)) << size;
  }
}

}  // namespace
}  // namespace kvserve
