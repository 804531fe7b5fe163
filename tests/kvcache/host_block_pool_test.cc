// HostBlockPool: lookups verified by hash, parent hash and tokens; LRU replacement at the limit;
// pinned entries kept; a stored block that is already there costs no copy.

#include "kvcache/host_block_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tests/status_matchers.h"

namespace kvserve {
namespace {

constexpr int kBlockSize = 4;

std::vector<TokenId> Tokens(TokenId first) {
  std::vector<TokenId> tokens(kBlockSize);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

BlockHash Hash(uint64_t n) { return BlockHash{n, n * 31 + 7}; }

TEST(HostBlockPoolTest, FindChecksHashParentAndTokens) {
  HostBlockPool pool(4, kBlockSize);
  const HostBlockId id = pool.Store(Hash(2), Hash(1), Tokens(10));
  ASSERT_NE(id, kNoHostBlock);
  EXPECT_EQ(pool.Find(Hash(2), Hash(1), Tokens(10)), id);
  EXPECT_EQ(pool.Find(Hash(2), Hash(1), Tokens(11)), kNoHostBlock);  // a hash collision
  EXPECT_EQ(pool.Find(Hash(2), Hash(9), Tokens(10)), kNoHostBlock);  // another chain
  EXPECT_EQ(pool.Find(Hash(3), Hash(1), Tokens(10)), kNoHostBlock);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

TEST(HostBlockPoolTest, StoringABlockAlreadyThereNeedsNoCopy) {
  HostBlockPool pool(4, kBlockSize);
  const HostBlockId id = pool.Store(Hash(2), Hash(1), Tokens(10));
  EXPECT_EQ(pool.Store(Hash(2), Hash(1), Tokens(10)), kNoHostBlock);
  EXPECT_EQ(pool.Find(Hash(2), Hash(1), Tokens(10)), id);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
}

TEST(HostBlockPoolTest, FullPoolReplacesTheLeastRecentlyUsedAndNeverGrows) {
  HostBlockPool pool(3, kBlockSize);
  for (uint64_t n = 1; n <= 3; ++n) ASSERT_NE(pool.Store(Hash(n), {}, Tokens(n)), kNoHostBlock);
  // Storing block 1 again makes it the most recently used, so 2 goes first.
  EXPECT_EQ(pool.Store(Hash(1), {}, Tokens(1)), kNoHostBlock);
  for (uint64_t n = 4; n <= 5; ++n) {
    ASSERT_NE(pool.Store(Hash(n), {}, Tokens(n)), kNoHostBlock);
    EXPECT_EQ(pool.num_cached_blocks(), 3);
    KVSERVE_EXPECT_OK(pool.CheckInvariants());
  }
  EXPECT_NE(pool.Find(Hash(1), {}, Tokens(1)), kNoHostBlock);
  EXPECT_EQ(pool.Find(Hash(2), {}, Tokens(2)), kNoHostBlock);
  EXPECT_EQ(pool.Find(Hash(3), {}, Tokens(3)), kNoHostBlock);
  EXPECT_NE(pool.Find(Hash(4), {}, Tokens(4)), kNoHostBlock);
  EXPECT_NE(pool.Find(Hash(5), {}, Tokens(5)), kNoHostBlock);
}

TEST(HostBlockPoolTest, PinnedEntriesAreNeverReplaced) {
  HostBlockPool pool(2, kBlockSize);
  const HostBlockId a = pool.Store(Hash(1), {}, Tokens(1));
  const HostBlockId b = pool.Store(Hash(2), {}, Tokens(2));
  pool.Pin(a);
  EXPECT_EQ(pool.num_pinned_blocks(), 1);
  EXPECT_EQ(pool.Store(Hash(3), {}, Tokens(3)), b);  // the only unpinned entry
  pool.Pin(b);
  EXPECT_EQ(pool.Store(Hash(4), {}, Tokens(4)), kNoHostBlock);  // all pinned: dropped
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
  pool.UnpinAll();
  EXPECT_EQ(pool.num_pinned_blocks(), 0);
  EXPECT_NE(pool.Find(Hash(1), {}, Tokens(1)), kNoHostBlock);
  EXPECT_NE(pool.Find(Hash(3), {}, Tokens(3)), kNoHostBlock);
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

TEST(HostBlockPoolTest, ACollidingStoreReplacesTheOldEntryUnlessPinned) {
  HostBlockPool pool(4, kBlockSize);
  const HostBlockId old = pool.Store(Hash(1), {}, Tokens(1));
  pool.Pin(old);
  EXPECT_EQ(pool.Store(Hash(1), {}, Tokens(50)), kNoHostBlock);  // being read: kept
  pool.UnpinAll();
  ASSERT_NE(pool.Store(Hash(1), {}, Tokens(50)), kNoHostBlock);
  EXPECT_EQ(pool.Find(Hash(1), {}, Tokens(1)), kNoHostBlock);
  EXPECT_NE(pool.Find(Hash(1), {}, Tokens(50)), kNoHostBlock);
  EXPECT_EQ(pool.num_cached_blocks(), 1);
  KVSERVE_EXPECT_OK(pool.CheckInvariants());
}

}  // namespace
}  // namespace kvserve
