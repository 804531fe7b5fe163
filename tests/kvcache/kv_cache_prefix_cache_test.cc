// KvCacheManager's prefix cache: hits, the never-cached last token, salts, eviction order,
// duplicate and stale entries, and the event stream with snapshots.

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "kvcache/kv_cache_manager.h"
#include "tests/kvcache/kv_cache_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::absl::StatusCode;
using ::kvserve::testing::StatusIs;
using namespace ::kvserve::testing_util;  // NOLINT(build/namespaces): test helpers

TEST(KvCachePrefixCacheTest, PrefixHitSharesFullBlocksByReference) {
  auto m = Make(12);
  const std::vector<TokenId> prefix = Range(8);
  AddAndCompute(*m, 1, Concat(prefix, Range(2, 50)));  // blocks: [0..3] [4..7] [50 51]
  const std::vector<TokenId> prompt = Concat(prefix, Range(5, 90));
  const PrefixMatch match = m->FindCachedPrefix(prompt, "");
  EXPECT_EQ(match.num_blocks, 2);
  EXPECT_EQ(match.num_tokens, 8);
  EXPECT_EQ(match.num_evictable_blocks, 0);
  absl::StatusOr<SequenceStart> start = m->AddSequence(2, prompt, "", 100);
  KVSERVE_ASSERT_OK(start);
  EXPECT_EQ(start->num_cached_tokens, 8);
  EXPECT_EQ(start->num_new_tokens, 5);
  EXPECT_EQ(*m->GetNumComputedTokens(2), 8);
  const std::vector<BlockId> a = Table(*m, 1);
  const std::vector<BlockId> b = Table(*m, 2);
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0], a[0]);
  EXPECT_EQ(b[1], a[1]);
  EXPECT_NE(b[2], a[2]);
  EXPECT_EQ(m->pool().ref_count(a[0]), 2);
  EXPECT_EQ(m->pool().ref_count(a[2]), 1);
  EXPECT_EQ(m->Stats().prefix_hit_tokens, 8);
  EXPECT_EQ(m->Stats().prefix_query_tokens, 10 + 13);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCachePrefixCacheTest, LastPromptTokenIsNeverServedFromCache) {
  auto m = Make(12);
  AddAndCompute(*m, 1, Range(8));  // both blocks cached
  EXPECT_EQ(m->FindCachedPrefix(Range(8), "").num_tokens, 4);
  EXPECT_EQ(m->FindCachedPrefix(Range(9), "").num_tokens, 8);
  EXPECT_EQ(m->FindCachedPrefix(Range(1), "").num_tokens, 0);
  absl::StatusOr<SequenceStart> start = m->AddSequence(2, Range(8), "", 100);
  KVSERVE_ASSERT_OK(start);
  EXPECT_EQ(start->num_cached_tokens, 4);
  EXPECT_EQ(start->num_new_tokens, 4);
}

TEST(KvCachePrefixCacheTest, CacheSaltKeepsTenantsApart) {
  auto m = Make(12);
  AddAndCompute(*m, 1, Range(9), "tenant-a");
  EXPECT_EQ(m->FindCachedPrefix(Range(9), "tenant-a").num_tokens, 8);
  EXPECT_EQ(m->FindCachedPrefix(Range(9), "tenant-b").num_tokens, 0);
  EXPECT_EQ(m->FindCachedPrefix(Range(9), "").num_tokens, 0);
}

TEST(KvCachePrefixCacheTest, FreedFullBlocksStayCachedUntilReused) {
  auto m = Make(6);                 // 5 usable
  AddAndCompute(*m, 1, Range(10));  // 2 full blocks + 1 partial
  Drain(*m);
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  KvCacheStats stats = m->Stats();
  EXPECT_EQ(stats.free_blocks, 5);
  EXPECT_EQ(stats.used_blocks, 0);
  EXPECT_EQ(stats.evictable_blocks, 2);
  EXPECT_EQ(stats.cached_blocks, 2);
  const PrefixMatch match = m->FindCachedPrefix(Range(10), "");
  EXPECT_EQ(match.num_tokens, 8);
  EXPECT_EQ(match.num_evictable_blocks, 2);
  // Filling the pool with other tokens evicts them, with kRemoved events.
  AddAndCompute(*m, 2, Range(20, 500));
  EXPECT_EQ(m->FindCachedPrefix(Range(10), "").num_tokens, 0);
  int removed = 0;
  for (const KvEvent& event : Drain(*m)) removed += event.kind == KvEventKind::kRemoved;
  EXPECT_EQ(removed, 2);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCachePrefixCacheTest, FreeReleasesTheChainTailFirst) {
  auto m = Make(5);                 // 4 usable
  AddAndCompute(*m, 1, Range(13));  // 3 full cached blocks + 1 partial block
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  // Needs 2 blocks: the uncached partial block goes first, then the chain's tail.
  KVSERVE_ASSERT_OK(m->AddSequence(2, Range(5, 700), "", 5));
  EXPECT_EQ(m->FindCachedPrefix(Range(13), "").num_tokens, 8);
  KVSERVE_ASSERT_OK(m->FreeSequence(2));
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCachePrefixCacheTest, EvictableHitsCountAgainstFreeBlocks) {
  auto m = Make(4);                // 3 usable
  AddAndCompute(*m, 1, Range(9));  // 2 cached + 1 partial
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  // The hit takes 2 evictable blocks out of the free queue; the rest needs 2 more: too many.
  EXPECT_THAT(m->AddSequence(2, Range(16), "", 16), StatusIs(StatusCode::kResourceExhausted));
  EXPECT_EQ(m->Stats().evictable_blocks, 2);
  absl::StatusOr<SequenceStart> start = m->AddSequence(2, Range(12), "", 16);
  KVSERVE_ASSERT_OK(start);
  EXPECT_EQ(start->num_cached_tokens, 8);
  EXPECT_EQ(m->Stats().free_blocks, 0);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCachePrefixCacheTest, ConcurrentDuplicateBlocksAreCachedOnceAndChainOn) {
  auto m = Make(16);
  const std::vector<TokenId> prompt = Range(9);
  KVSERVE_ASSERT_OK(m->AddSequence(1, prompt, "", 9));
  KVSERVE_ASSERT_OK(m->AddSequence(2, prompt, "", 9));  // nothing cached yet
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 9));
  KVSERVE_ASSERT_OK(m->CommitComputed(2, 9));
  EXPECT_EQ(Drain(*m).size(), 2u);  // only sequence 1's two blocks
  // Sequence 2 goes on to fill a third block: it chains from sequence 1's cached blocks.
  KVSERVE_ASSERT_OK(m->AppendTokens(2, Range(3, 9)));
  KVSERVE_ASSERT_OK(m->AllocateSlots(2, 3));
  KVSERVE_ASSERT_OK(m->CommitComputed(2, 3));
  EXPECT_EQ(Drain(*m).size(), 1u);
  EXPECT_EQ(m->FindCachedPrefix(Range(13), "").num_tokens, 12);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCachePrefixCacheTest, EntryWithAStaleParentIsReplaced) {
  auto m = Make(9);  // 8 usable
  const std::vector<TokenId> prompt = Range(9);
  KVSERVE_ASSERT_OK(m->AddSequence(1, prompt, "", 9));
  KVSERVE_ASSERT_OK(m->AddSequence(2, prompt, "", 9));
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 4));  // sequence 1's block 0 is cached
  KVSERVE_ASSERT_OK(m->CommitComputed(2, 8));  // 2's block 1 is cached, chained from 1's block 0
  const BlockId block1 = Table(*m, 2)[1];
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  KVSERVE_ASSERT_OK(m->AddSequence(3, Range(20, 100), "", 20));  // evicts 1's block 0
  KVSERVE_ASSERT_OK(m->FreeSequence(3));
  KVSERVE_ASSERT_OK(m->FreeSequence(2));
  // block1 is still indexed, but its parent is gone: no lookup can reach it.
  EXPECT_TRUE(m->pool().is_cached(block1));
  EXPECT_EQ(m->FindCachedPrefix(prompt, "").num_tokens, 0);
  Drain(*m);
  // Recomputing the prompt replaces the unreachable entry, so the prefix is whole again.
  AddAndCompute(*m, 4, prompt);
  const std::vector<KvEvent> events = Drain(*m);
  EXPECT_NE(std::find(events.begin(), events.end(),
                      KvEvent{KvEventKind::kRemoved, m->pool().hash(Table(*m, 4)[1]), block1}),
            events.end());
  EXPECT_EQ(m->FindCachedPrefix(prompt, "").num_tokens, 8);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCachePrefixCacheTest, EventsComeInNumberedBatchesWithTheEpoch) {
  auto m = Make(8);
  KvEventBatch batch;
  m->DrainEvents(&batch);
  EXPECT_EQ(batch.epoch, 7u);
  EXPECT_EQ(batch.sequence_number, 0u);  // nothing happened
  AddAndCompute(*m, 1, Range(8));
  m->DrainEvents(&batch);
  EXPECT_EQ(batch.sequence_number, 1u);
  EXPECT_EQ(batch.events.size(), 2u);
  AddAndCompute(*m, 2, Range(8, 50));
  m->DrainEvents(&batch);
  EXPECT_EQ(batch.sequence_number, 2u);
  m->DrainEvents(&batch);
  EXPECT_EQ(batch.sequence_number, 0u);
  EXPECT_TRUE(batch.events.empty());
}

TEST(KvCachePrefixCacheTest, SnapshotIsTheIndexAsOfTheLastDrainedBatch) {
  auto m = Make(4);  // 3 usable
  AddAndCompute(*m, 1, Range(8));
  KvEventBatch batch;
  m->DrainEvents(&batch);
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  std::vector<BlockHash> hashes;
  HashFullBlocks(Range(8), 4, "", &hashes);
  AddAndCompute(*m, 2, Range(12, 40));  // evicts both, caches three new blocks (pending)
  KvSnapshot snapshot = m->Snapshot();
  EXPECT_EQ(snapshot.epoch, 7u);
  EXPECT_EQ(snapshot.sequence_number, 1u);
  EXPECT_EQ(absl::flat_hash_set<BlockHash>(snapshot.hashes.begin(), snapshot.hashes.end()),
            absl::flat_hash_set<BlockHash>(hashes.begin(), hashes.end()));
  m->DrainEvents(&batch);
  snapshot = m->Snapshot();
  EXPECT_EQ(snapshot.sequence_number, 2u);
  std::vector<BlockHash> now;
  HashFullBlocks(Range(12, 40), 4, "", &now);
  EXPECT_EQ(absl::flat_hash_set<BlockHash>(snapshot.hashes.begin(), snapshot.hashes.end()),
            absl::flat_hash_set<BlockHash>(now.begin(), now.end()));
}

}  // namespace
}  // namespace kvserve
