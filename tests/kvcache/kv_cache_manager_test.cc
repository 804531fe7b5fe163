// KvCacheManager: admission, slot reservation, commit, decode, fork, free and their errors.
// Prefix caching and events are in kv_cache_prefix_cache_test.cc.

#include "kvcache/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "tests/kvcache/kv_cache_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::absl::StatusCode;
using ::kvserve::testing::StatusIs;
using namespace ::kvserve::testing_util;  // NOLINT(build/namespaces): test helpers
using ::testing::_;
using ::testing::HasSubstr;

TEST(KvCacheManagerTest, CreateRejectsInvalidConfigs) {
  EXPECT_THAT(KvCacheManager::Create({.num_blocks = 0}), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(KvCacheManager::Create({.num_blocks = 1}), StatusIs(StatusCode::kInvalidArgument));
  for (int block_size : {0, 3, 12, 512}) {
    EXPECT_THAT(KvCacheManager::Create({.num_blocks = 8, .block_size = block_size}),
                StatusIs(StatusCode::kInvalidArgument));
  }
  const absl::Status status = KvCacheManager::Create({.num_blocks = 1}).status();
  EXPECT_THAT(status, StatusIs(_, HasSubstr("num_blocks")));
}

TEST(KvCacheManagerTest, EpochIsTheConfiguredOneOrRandom) {
  EXPECT_EQ(Make(4)->epoch(), 7u);
  auto a = *KvCacheManager::Create({.num_blocks = 4});
  auto b = *KvCacheManager::Create({.num_blocks = 4});
  EXPECT_NE(a->epoch(), 0u);
  EXPECT_NE(a->epoch(), b->epoch());
}

TEST(KvCacheManagerTest, AddSequenceReservesBlocksForThePrompt) {
  auto m = Make(10);
  absl::StatusOr<SequenceStart> start = m->AddSequence(1, Range(10), "", 100);
  KVSERVE_ASSERT_OK(start);
  EXPECT_EQ(start->num_cached_tokens, 0);
  EXPECT_EQ(start->num_new_tokens, 10);
  EXPECT_EQ(Table(*m, 1).size(), 3u);
  const KvCacheStats stats = m->Stats();
  EXPECT_EQ(stats.total_blocks, 9);
  EXPECT_EQ(stats.used_blocks, 3);
  EXPECT_EQ(stats.free_blocks, 6);
  EXPECT_EQ(stats.num_sequences, 1);
  EXPECT_EQ(*m->GetNumComputedTokens(1), 0);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheManagerTest, AddSequenceRejectsMisuse) {
  auto m = Make(10);
  EXPECT_THAT(m->AddSequence(1, {}, "", 4), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(m->AddSequence(1, Range(3), "", 0), StatusIs(StatusCode::kInvalidArgument));
  KVSERVE_ASSERT_OK(m->AddSequence(1, Range(3), "", 4));
  EXPECT_THAT(m->AddSequence(1, Range(3), "", 4), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_EQ(m->Stats().used_blocks, 1);
}

TEST(KvCacheManagerTest, ChunkedPrefillReservesOnlyTheBudget) {
  auto m = Make(10);
  absl::StatusOr<SequenceStart> start = m->AddSequence(1, Range(10), "", 3);
  KVSERVE_ASSERT_OK(start);
  EXPECT_EQ(start->num_new_tokens, 3);
  EXPECT_EQ(Table(*m, 1).size(), 1u);
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 3));
  KVSERVE_ASSERT_OK(m->AllocateSlots(1, 5));  // tokens 3..7
  EXPECT_EQ(Table(*m, 1).size(), 2u);
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 5));
  KVSERVE_ASSERT_OK(m->AllocateSlots(1, 2));
  EXPECT_EQ(Table(*m, 1).size(), 3u);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheManagerTest, AddSequenceIsAllOrNothing) {
  auto m = Make(5);                                            // 4 usable blocks
  AddAndCompute(*m, 1, Range(8, 100));                         // 2 cached blocks, held
  KVSERVE_ASSERT_OK(m->AddSequence(2, Range(4, 200), "", 4));  // 1 block
  const KvCacheStats before = m->Stats();
  EXPECT_THAT(m->AddSequence(3, Range(12, 300), "", 12), StatusIs(StatusCode::kResourceExhausted));
  EXPECT_FALSE(m->HasSequence(3));
  const KvCacheStats after = m->Stats();
  EXPECT_EQ(after.free_blocks, before.free_blocks);
  EXPECT_EQ(after.cached_blocks, before.cached_blocks);
  EXPECT_TRUE(Drain(*m).size() == 2u);  // only the two stored blocks of sequence 1
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheManagerTest, AllocateSlotsRejectsMisuseAndIsAllOrNothing) {
  auto m = Make(4);  // 3 usable
  EXPECT_THAT(m->AllocateSlots(9, 1), StatusIs(StatusCode::kNotFound));
  KVSERVE_ASSERT_OK(m->AddSequence(1, Range(4), "", 4));
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 4));
  EXPECT_THAT(m->AllocateSlots(1, 1), StatusIs(StatusCode::kInvalidArgument));  // no token known
  EXPECT_THAT(m->AllocateSlots(1, -1), StatusIs(StatusCode::kInvalidArgument));
  KVSERVE_ASSERT_OK(m->AppendTokens(1, Range(9, 10)));
  KVSERVE_ASSERT_OK(m->AllocateSlots(1, 0));
  EXPECT_THAT(m->AllocateSlots(1, 9), StatusIs(StatusCode::kResourceExhausted));  // needs 3 blocks
  EXPECT_EQ(Table(*m, 1).size(), 1u);
  EXPECT_EQ(m->Stats().free_blocks, 2);
  KVSERVE_ASSERT_OK(m->AllocateSlots(1, 8));
  EXPECT_EQ(Table(*m, 1).size(), 3u);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheManagerTest, CommitComputedHashesNewlyFullBlocks) {
  auto m = Make(8);
  EXPECT_THAT(m->CommitComputed(3, 1), StatusIs(StatusCode::kNotFound));
  const std::vector<TokenId> prompt = Range(10, 40);
  KVSERVE_ASSERT_OK(m->AddSequence(1, prompt, "salt", 6));
  EXPECT_THAT(m->CommitComputed(1, 9), StatusIs(StatusCode::kFailedPrecondition));  // 8 slots
  EXPECT_THAT(m->CommitComputed(1, -1), StatusIs(StatusCode::kFailedPrecondition));
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 3));
  EXPECT_TRUE(Drain(*m).empty());
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 3));  // block 0 is full
  std::vector<BlockHash> hashes;
  HashFullBlocks(prompt, 4, "salt", &hashes);
  const std::vector<BlockId> table = Table(*m, 1);
  EXPECT_EQ(Drain(*m), (std::vector<KvEvent>{{KvEventKind::kStored, hashes[0], table[0]}}));
  KVSERVE_ASSERT_OK(m->AllocateSlots(1, 4));
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 4));
  EXPECT_EQ(Drain(*m), (std::vector<KvEvent>{{KvEventKind::kStored, hashes[1], table[1]}}));
  EXPECT_THAT(m->CommitComputed(1, 1), StatusIs(StatusCode::kFailedPrecondition));  // all computed
}

TEST(KvCacheManagerTest, DecodeLoopAppendsOneSlotAtATime) {
  auto m = Make(8);
  KVSERVE_ASSERT_OK(m->AddSequence(1, Range(3), "", 8));
  KVSERVE_ASSERT_OK(m->CommitComputed(1, 3));
  for (int step = 0; step < 10; ++step) {
    KVSERVE_ASSERT_OK(m->AppendTokens(1, {1000 + step}));
    KVSERVE_ASSERT_OK(m->AllocateSlots(1, 1));
    const int position = *m->GetNumComputedTokens(1);
    int64_t slot = 0;
    KVSERVE_ASSERT_OK(m->GetSlotMapping(1, position, absl::MakeSpan(&slot, 1)));
    EXPECT_EQ(slot, int64_t{Table(*m, 1)[position / 4]} * 4 + position % 4);
    KVSERVE_ASSERT_OK(m->CommitComputed(1, 1));
  }
  EXPECT_EQ(Table(*m, 1).size(), 4u);  // 13 tokens
  EXPECT_EQ(m->GetTokens(1)->size(), 13u);
  EXPECT_EQ(m->Stats().cached_blocks, 3);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheManagerTest, SlotMappingFollowsTheBlockTable) {
  auto m = Make(8);
  EXPECT_THAT(m->GetSlotMapping(5, 0, {}), StatusIs(StatusCode::kNotFound));
  KVSERVE_ASSERT_OK(m->AddSequence(1, Range(6), "", 6));
  const std::vector<BlockId> table = Table(*m, 1);
  std::vector<int64_t> slots(6);
  KVSERVE_ASSERT_OK(m->GetSlotMapping(1, 0, absl::MakeSpan(slots)));
  for (int p = 0; p < 6; ++p) EXPECT_EQ(slots[p], int64_t{table[p / 4]} * 4 + p % 4);
  std::vector<int64_t> too_many(9);  // the table covers 8 positions
  EXPECT_THAT(m->GetSlotMapping(1, 0, absl::MakeSpan(too_many)), StatusIs(StatusCode::kOutOfRange));
  EXPECT_THAT(m->GetSlotMapping(1, -1, absl::MakeSpan(slots)), StatusIs(StatusCode::kOutOfRange));
}

TEST(KvCacheManagerTest, ForkSharesFullBlocksAndCopiesThePartialOne) {
  auto m = Make(8);
  AddAndCompute(*m, 1, Range(6));  // one full block, one partial
  absl::StatusOr<std::optional<BlockCopy>> copy = m->ForkSequence(1, 2);
  KVSERVE_ASSERT_OK(copy);
  const std::vector<BlockId> parent = Table(*m, 1);
  const std::vector<BlockId> child = Table(*m, 2);
  ASSERT_EQ(child.size(), 2u);
  EXPECT_EQ(child[0], parent[0]);
  EXPECT_NE(child[1], parent[1]);
  ASSERT_TRUE(copy->has_value());
  EXPECT_EQ(**copy, (BlockCopy{parent[1], child[1]}));
  EXPECT_EQ(m->pool().ref_count(parent[0]), 2);
  EXPECT_EQ(*m->GetNumComputedTokens(2), 6);
  EXPECT_EQ(m->GetTokens(2)->size(), 6u);
  // The children diverge from here on; each fills its own block.
  KVSERVE_ASSERT_OK(m->AppendTokens(2, {77, 78}));
  KVSERVE_ASSERT_OK(m->AllocateSlots(2, 2));
  KVSERVE_ASSERT_OK(m->CommitComputed(2, 2));
  EXPECT_EQ(Table(*m, 2).size(), 2u);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheManagerTest, ForkAtABlockBoundaryCopiesNothing) {
  auto m = Make(8);
  AddAndCompute(*m, 1, Range(8));
  absl::StatusOr<std::optional<BlockCopy>> copy = m->ForkSequence(1, 2);
  KVSERVE_ASSERT_OK(copy);
  EXPECT_FALSE(copy->has_value());
  EXPECT_EQ(Table(*m, 2), Table(*m, 1));
  EXPECT_EQ(m->Stats().used_blocks, 2);
}

TEST(KvCacheManagerTest, ForkRejectsMisuseAndIsAllOrNothing) {
  auto m = Make(3);  // 2 usable
  EXPECT_THAT(m->ForkSequence(1, 2), StatusIs(StatusCode::kNotFound));
  AddAndCompute(*m, 1, Range(6));  // takes both blocks, one partial
  EXPECT_THAT(m->ForkSequence(1, 1), StatusIs(StatusCode::kAlreadyExists));
  EXPECT_THAT(m->ForkSequence(1, 2), StatusIs(StatusCode::kResourceExhausted));
  EXPECT_FALSE(m->HasSequence(2));
  EXPECT_EQ(m->pool().ref_count(Table(*m, 1)[0]), 1);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheManagerTest, FreeingTwiceOrUnknownIsNotFound) {
  auto m = Make(4);
  EXPECT_THAT(m->FreeSequence(1), StatusIs(StatusCode::kNotFound));
  KVSERVE_ASSERT_OK(m->AddSequence(1, Range(3), "", 3));
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  EXPECT_THAT(m->FreeSequence(1), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(m->AppendTokens(1, {1}), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(m->GetBlockTable(1), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(m->GetTokens(1), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(m->GetNumComputedTokens(1), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(m->Stats().free_blocks, 3);
  // The id can be used again once freed.
  KVSERVE_EXPECT_OK(m->AddSequence(1, Range(3), "", 3));
}

TEST(KvCacheManagerTest, FreePlusUsedIsTotalAndEvictableCountsAsFree) {
  auto m = Make(10);
  AddAndCompute(*m, 1, Range(10));
  AddAndCompute(*m, 2, Range(6, 100));
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  const KvCacheStats stats = m->Stats();
  EXPECT_EQ(stats.free_blocks + stats.used_blocks, stats.total_blocks);
  EXPECT_EQ(stats.used_blocks, 2);
  EXPECT_EQ(stats.evictable_blocks, 2);
  EXPECT_EQ(stats.free_blocks, 7);
  EXPECT_EQ(stats.cached_blocks, 3);
}

// The whole lifecycle at the block sizes production uses.
class KvCacheManagerBlockSizeTest : public ::testing::TestWithParam<int> {};

TEST_P(KvCacheManagerBlockSizeTest, PrefillDecodeForkFreeAndHit) {
  const int bs = GetParam();
  auto m = Make(64, bs);
  const std::vector<TokenId> prompt = Range(3 * bs + 1);
  AddAndCompute(*m, 1, prompt);
  EXPECT_EQ(Table(*m, 1).size(), 4u);
  for (int step = 0; step < bs; ++step) {
    KVSERVE_ASSERT_OK(m->AppendTokens(1, {5000 + step}));
    KVSERVE_ASSERT_OK(m->AllocateSlots(1, 1));
    KVSERVE_ASSERT_OK(m->CommitComputed(1, 1));
  }
  EXPECT_EQ(Table(*m, 1).size(), 5u);
  absl::StatusOr<std::optional<BlockCopy>> copy = m->ForkSequence(1, 2);
  KVSERVE_ASSERT_OK(copy);
  EXPECT_TRUE(copy->has_value());  // 4 * bs + 1 computed tokens
  KVSERVE_ASSERT_OK(m->FreeSequence(1));
  KVSERVE_ASSERT_OK(m->FreeSequence(2));
  EXPECT_EQ(m->Stats().used_blocks, 0);
  EXPECT_EQ(m->Stats().evictable_blocks, 4);
  EXPECT_EQ(m->FindCachedPrefix(Concat(prompt, Range(bs, 5000)), "").num_tokens, 4 * bs);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

INSTANTIATE_TEST_SUITE_P(ProductionBlockSizes, KvCacheManagerBlockSizeTest,
                         ::testing::Values(8, 16, 32));

}  // namespace
}  // namespace kvserve
