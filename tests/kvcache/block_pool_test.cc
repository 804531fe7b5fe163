#include "kvcache/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;

constexpr int kBlockSize = 4;

std::vector<TokenId> Tokens(TokenId first) { return {first, first + 1, first + 2, first + 3}; }

std::vector<KvEvent> TakeEvents(BlockPool& pool) {
  std::vector<KvEvent> events;
  pool.TakeEvents(&events);
  return events;
}

TEST(BlockPoolTest, NeverHandsOutTheNullBlock) {
  BlockPool pool(5, kBlockSize);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  std::vector<BlockId> blocks;
  KVSERVE_ASSERT_OK(pool.Allocate(4, &blocks));
  EXPECT_EQ(std::count(blocks.begin(), blocks.end(), kNullBlock), 0);
  std::vector<BlockId> sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<BlockId>{1, 2, 3, 4}));
  for (BlockId id : blocks) EXPECT_EQ(pool.ref_count(id), 1);
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

TEST(BlockPoolTest, AllocateIsAllOrNothing) {
  BlockPool pool(4, kBlockSize);
  std::vector<BlockId> blocks = {77};
  EXPECT_THAT(pool.Allocate(4, &blocks), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(blocks, (std::vector<BlockId>{77}));
  EXPECT_EQ(pool.num_free_blocks(), 3);
  KVSERVE_ASSERT_OK(pool.Allocate(3, &blocks));
  EXPECT_EQ(blocks.size(), 4u);
  EXPECT_THAT(pool.Allocate(1, &blocks), StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(BlockPoolTest, UncachedBlocksAreReusedFirstCachedOnesInLruOrder) {
  BlockPool pool(5, kBlockSize);
  std::vector<BlockId> b;
  KVSERVE_ASSERT_OK(pool.Allocate(4, &b));
  pool.Cache(b[0], BlockHash{1, 0}, Tokens(0), kNullBlock, 0, BlockHash{});
  pool.Cache(b[1], BlockHash{2, 0}, Tokens(4), b[0], pool.generation(b[0]), BlockHash{1, 0});
  pool.Release(b[0]);  // cached: tail
  pool.Release(b[2]);  // uncached: head
  pool.Release(b[1]);  // cached: tail, after b[0]
  EXPECT_EQ(pool.num_free_blocks(), 3);
  EXPECT_EQ(pool.num_evictable_blocks(), 2);
  TakeEvents(pool);
  std::vector<BlockId> again;
  KVSERVE_ASSERT_OK(pool.Allocate(2, &again));
  EXPECT_EQ(again, (std::vector<BlockId>{b[2], b[0]}));
  // b[0] was evicted: its hash left the index with a kRemoved event; b[1] is still cached.
  EXPECT_EQ(pool.FindHash(BlockHash{1, 0}), kNullBlock);
  EXPECT_EQ(pool.FindHash(BlockHash{2, 0}), b[1]);
  EXPECT_EQ(TakeEvents(pool),
            (std::vector<KvEvent>{{KvEventKind::kRemoved, BlockHash{1, 0}, b[0]}}));
  EXPECT_EQ(pool.num_evictable_blocks(), 1);
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

TEST(BlockPoolTest, AcquiringAFreeCachedBlockTakesItOffTheFreeQueue) {
  BlockPool pool(3, kBlockSize);
  std::vector<BlockId> b;
  KVSERVE_ASSERT_OK(pool.Allocate(1, &b));
  pool.Cache(b[0], BlockHash{5, 5}, Tokens(0), kNullBlock, 0, BlockHash{});
  pool.Release(b[0]);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.Acquire(b[0]);
  pool.Acquire(b[0]);
  EXPECT_EQ(pool.ref_count(b[0]), 2);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_EQ(pool.num_evictable_blocks(), 0);
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

TEST(BlockPoolTest, MatchesComparesTokensParentAndGeneration) {
  BlockPool pool(4, kBlockSize);
  std::vector<BlockId> b;
  KVSERVE_ASSERT_OK(pool.Allocate(2, &b));
  const uint32_t parent_generation = pool.generation(b[0]);
  pool.Cache(b[1], BlockHash{3, 3}, Tokens(10), b[0], parent_generation, BlockHash{5, 5});
  EXPECT_TRUE(pool.Matches(b[1], Tokens(10), b[0], parent_generation));
  EXPECT_FALSE(pool.Matches(b[1], Tokens(11), b[0], parent_generation));  // a hash collision
  EXPECT_FALSE(pool.Matches(b[1], Tokens(10), kNullBlock, 0));
  EXPECT_FALSE(pool.Matches(b[1], Tokens(10), b[0], parent_generation + 1));
  EXPECT_FALSE(pool.Matches(b[0], Tokens(10), kNullBlock, 0));  // not cached
  // Handing the parent out again bumps its generation, so the child's link goes stale.
  pool.Release(b[0]);
  std::vector<BlockId> again;
  KVSERVE_ASSERT_OK(pool.Allocate(2, &again));
  EXPECT_EQ(again.front(), b[0]);
  EXPECT_NE(pool.generation(b[0]), parent_generation);
}

TEST(BlockPoolTest, EvictDropsAFreeEntryAndQueuesItFirst) {
  BlockPool pool(4, kBlockSize);
  std::vector<BlockId> b;
  KVSERVE_ASSERT_OK(pool.Allocate(1, &b));
  pool.Cache(b[0], BlockHash{8, 1}, Tokens(0), kNullBlock, 0, BlockHash{});
  pool.Release(b[0]);
  TakeEvents(pool);
  pool.Evict(b[0]);
  EXPECT_FALSE(pool.is_cached(b[0]));
  EXPECT_EQ(pool.num_evictable_blocks(), 0);
  EXPECT_EQ(TakeEvents(pool).size(), 1u);
  std::vector<BlockId> again;
  KVSERVE_ASSERT_OK(pool.Allocate(1, &again));
  EXPECT_EQ(again[0], b[0]);
  EXPECT_TRUE(TakeEvents(pool).empty());  // no second kRemoved
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

TEST(BlockPoolTest, StoresTokensAndEmitsStoredEvents) {
  BlockPool pool(3, kBlockSize);
  std::vector<BlockId> b;
  KVSERVE_ASSERT_OK(pool.Allocate(1, &b));
  pool.Cache(b[0], BlockHash{4, 2}, Tokens(20), kNullBlock, 0, BlockHash{});
  EXPECT_TRUE(pool.is_cached(b[0]));
  EXPECT_EQ(pool.hash(b[0]), (BlockHash{4, 2}));
  const absl::Span<const TokenId> stored = pool.tokens(b[0]);
  EXPECT_EQ(std::vector<TokenId>(stored.begin(), stored.end()), Tokens(20));
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  EXPECT_EQ(TakeEvents(pool),
            (std::vector<KvEvent>{{KvEventKind::kStored, BlockHash{4, 2}, b[0]}}));
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

TEST(BlockPoolTest, BookkeepingStaysUnder64BytesPerBlock) {
  BlockPool pool(4097, 16);
  EXPECT_LE(pool.BookkeepingBytesPerBlock(), 64.0);
}

}  // namespace
}  // namespace kvserve
