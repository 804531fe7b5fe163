// WorkerBooks: snapshot parts and event batches keep the worker's hash set; a gap, a part out of
// order or a new epoch voids the view and asks for a resync exactly once; capacity, health and
// the router's reservations follow the reports.

#include "router/worker_books.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "proto/kv_events_conversion.h"
#include "tests/router/router_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using testing_util::AddBatch;
using testing_util::AddClearBatch;
using testing_util::CapacitySpec;
using testing_util::FakeChain;
using testing_util::FakeHash;
using testing_util::MakeStatus;
using testing_util::Range;
using testing_util::SetSnapshotPart;

constexpr int kSlot = 5;
constexpr uint64_t kEpoch = 41;

class WorkerBooksTest : public ::testing::Test {
 protected:
  // Applies `status`, which must succeed.
  ApplyResult Apply(const kvserve::v1::WorkerStatus& status) {
    absl::StatusOr<ApplyResult> result = books_.Apply(status);
    KVSERVE_EXPECT_OK(result);
    return result.ok() ? *result : ApplyResult{};
  }

  // Brings the books in sync with `hashes` at sequence `sequence`, in one snapshot part.
  void Sync(const std::vector<BlockHash>& hashes, uint64_t sequence) {
    kvserve::v1::WorkerStatus status = MakeStatus(kEpoch, {});
    SetSnapshotPart(&status, sequence, 0, true, hashes);
    Apply(status);
    ASSERT_EQ(books_.sync_state(), KvSyncState::kInSync);
  }

  PrefixIndex index_;
  PrefixIndex host_index_;
  WorkerBooks books_{"w0", kSlot, 16, /*reports_to_cover=*/2, &index_, &host_index_};
};

TEST_F(WorkerBooksTest, UnreachableAndNotRoutableUntilTheFirstReport) {
  EXPECT_EQ(books_.health(), WorkerHealth::kUnreachable);
  EXPECT_FALSE(books_.routable());
  const ApplyResult result = Apply(MakeStatus(kEpoch, {.total = 50, .free = 20, .evictable = 5}));
  EXPECT_TRUE(result.capacity_changed);
  EXPECT_TRUE(books_.routable());
  EXPECT_EQ(books_.capacity().total_blocks, 50);
  EXPECT_EQ(books_.capacity().free_blocks, 20);
  EXPECT_EQ(books_.capacity().evictable_blocks, 5);
  EXPECT_EQ(books_.capacity().used_blocks, 30);
  EXPECT_FALSE(
      Apply(MakeStatus(kEpoch, {.total = 50, .free = 20, .evictable = 5})).capacity_changed)
      << "an identical report changes nothing";
}

TEST_F(WorkerBooksTest, SnapshotPartsResetThenFillTheSet) {
  index_.Insert(kSlot, FakeHash(999));  // stale, from before
  kvserve::v1::WorkerStatus first = MakeStatus(kEpoch, {});
  SetSnapshotPart(&first, 7, 0, false, FakeChain(3));
  Apply(first);
  EXPECT_EQ(books_.sync_state(), KvSyncState::kReceivingSnapshot);
  EXPECT_FALSE(index_.Holds(kSlot, FakeHash(999))) << "part 0 must empty the set";
  kvserve::v1::WorkerStatus second = MakeStatus(kEpoch, {});
  SetSnapshotPart(&second, 7, 1, true, {FakeHash(10), FakeHash(11)});
  Apply(second);
  EXPECT_EQ(books_.sync_state(), KvSyncState::kInSync);
  EXPECT_EQ(books_.last_sequence(), 7u);
  EXPECT_EQ(books_.cached_blocks(), 5);
  EXPECT_TRUE(index_.Holds(kSlot, FakeHash(11)));
}

TEST_F(WorkerBooksTest, BatchesApplyStoredRemovedAndAllCleared) {
  Sync(FakeChain(2), 3);
  kvserve::v1::WorkerStatus status = MakeStatus(kEpoch, {});
  AddBatch(&status, 4, {FakeHash(5), FakeHash(6)}, {FakeHash(0)});
  AddBatch(&status, 5, {}, {FakeHash(6)});
  const ApplyResult result = Apply(status);
  EXPECT_EQ(result.batches_applied, 2);
  EXPECT_FALSE(result.resync_needed);
  EXPECT_EQ(books_.last_sequence(), 5u);
  EXPECT_FALSE(index_.Holds(kSlot, FakeHash(0)));
  EXPECT_TRUE(index_.Holds(kSlot, FakeHash(1)));
  EXPECT_TRUE(index_.Holds(kSlot, FakeHash(5)));
  EXPECT_FALSE(index_.Holds(kSlot, FakeHash(6)));

  kvserve::v1::WorkerStatus clear = MakeStatus(kEpoch, {});
  AddClearBatch(&clear, 6);
  Apply(clear);
  EXPECT_EQ(books_.cached_blocks(), 0);
  EXPECT_EQ(books_.sync_state(), KvSyncState::kInSync) << "all-cleared keeps the stream in sync";
  EXPECT_EQ(books_.last_sequence(), 6u);
}

TEST_F(WorkerBooksTest, SequenceGapVoidsTheViewAndAsksForResyncOnce) {
  Sync(FakeChain(4), 10);
  kvserve::v1::WorkerStatus gap = MakeStatus(kEpoch, {});
  AddBatch(&gap, 12, {FakeHash(50)});  // 11 is missing
  ApplyResult result = Apply(gap);
  EXPECT_TRUE(result.resync_needed);
  EXPECT_EQ(result.batches_applied, 0);
  EXPECT_EQ(books_.sync_state(), KvSyncState::kAwaitingSnapshot);
  EXPECT_EQ(books_.cached_blocks(), 0) << "a void view must not attract requests";

  kvserve::v1::WorkerStatus more = MakeStatus(kEpoch, {});
  AddBatch(&more, 13, {FakeHash(51)});
  result = Apply(more);
  EXPECT_FALSE(result.resync_needed) << "the service already reopens the stream";
  EXPECT_EQ(result.batches_skipped, 1);
  EXPECT_EQ(books_.cached_blocks(), 0);

  Sync({FakeHash(60)}, 20);  // the fresh snapshot
  kvserve::v1::WorkerStatus next = MakeStatus(kEpoch, {});
  AddBatch(&next, 21, {FakeHash(61)});
  result = Apply(next);
  EXPECT_EQ(result.batches_applied, 1);
  EXPECT_EQ(books_.cached_blocks(), 2);
}

TEST_F(WorkerBooksTest, RepeatedOrOldSequenceIsAGapToo) {
  Sync(FakeChain(1), 10);
  kvserve::v1::WorkerStatus replay = MakeStatus(kEpoch, {});
  AddBatch(&replay, 10, {FakeHash(7)});
  EXPECT_TRUE(Apply(replay).resync_needed);
}

TEST_F(WorkerBooksTest, SnapshotPartOutOfOrderOrBatchInsideSnapshotAsksForResync) {
  kvserve::v1::WorkerStatus first = MakeStatus(kEpoch, {});
  SetSnapshotPart(&first, 7, 0, false, FakeChain(2));
  Apply(first);
  kvserve::v1::WorkerStatus skipped = MakeStatus(kEpoch, {});
  SetSnapshotPart(&skipped, 7, 2, true, FakeChain(2, 1));
  EXPECT_TRUE(Apply(skipped).resync_needed);
  EXPECT_EQ(books_.sync_state(), KvSyncState::kAwaitingSnapshot);

  kvserve::v1::WorkerStatus again = MakeStatus(kEpoch, {});
  SetSnapshotPart(&again, 8, 0, false, FakeChain(2));
  Apply(again);
  kvserve::v1::WorkerStatus batch = MakeStatus(kEpoch, {});
  AddBatch(&batch, 9, {FakeHash(9)});
  EXPECT_TRUE(Apply(batch).resync_needed);
}

TEST_F(WorkerBooksTest, BatchBeforeAnySnapshotAsksForOne) {
  kvserve::v1::WorkerStatus status = MakeStatus(kEpoch, {});
  AddBatch(&status, 1, {FakeHash(1)});
  EXPECT_TRUE(Apply(status).resync_needed);
  EXPECT_EQ(books_.cached_blocks(), 0);
}

TEST_F(WorkerBooksTest, NewEpochVoidsHashesAndReservations) {
  Sync(FakeChain(4), 3);
  books_.Reserve("r1", 10);
  ASSERT_EQ(books_.reserved_blocks(), 10);
  const ApplyResult result = Apply(MakeStatus(kEpoch + 1, {}));
  EXPECT_TRUE(result.resync_needed);
  EXPECT_TRUE(result.capacity_changed);
  EXPECT_EQ(books_.epoch(), kEpoch + 1);
  EXPECT_EQ(books_.cached_blocks(), 0);
  EXPECT_EQ(books_.reserved_blocks(), 0);
  EXPECT_EQ(books_.outstanding_requests(), 0);
}

TEST_F(WorkerBooksTest, NewEpochWithItsSnapshotNeedsNoResync) {
  Sync(FakeChain(4), 3);
  kvserve::v1::WorkerStatus status = MakeStatus(kEpoch + 1, {});
  SetSnapshotPart(&status, 0, 0, true, {FakeHash(70)});
  const ApplyResult result = Apply(status);
  EXPECT_FALSE(result.resync_needed);
  EXPECT_EQ(books_.sync_state(), KvSyncState::kInSync);
  EXPECT_EQ(books_.cached_blocks(), 1);
  EXPECT_TRUE(index_.Holds(kSlot, FakeHash(70)));
}

TEST_F(WorkerBooksTest, RejectsEpochZeroAndAForeignBlockSize) {
  EXPECT_THAT(books_.Apply(MakeStatus(0, {})), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(books_.Apply(MakeStatus(kEpoch, {.block_size = 32})),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(books_.has_capacity());
}

TEST_F(WorkerBooksTest, DrainingAndUnreachableAreNotRoutable) {
  Sync(FakeChain(2), 1);
  kvserve::v1::WorkerStatus draining = MakeStatus(kEpoch, {});
  draining.set_draining(true);
  EXPECT_TRUE(Apply(draining).capacity_changed);
  EXPECT_EQ(books_.health(), WorkerHealth::kDraining);
  EXPECT_FALSE(books_.routable());
  books_.MarkUnreachable();
  EXPECT_EQ(books_.health(), WorkerHealth::kUnreachable);
  EXPECT_EQ(books_.cached_blocks(), 0);
  EXPECT_FALSE(books_.routable());
  Apply(MakeStatus(kEpoch, {}));
  EXPECT_TRUE(books_.routable()) << "a reconnected stream makes it healthy again";
}

TEST_F(WorkerBooksTest, ReservationsAreReleasedByCoveringReportsOrRelease) {
  Apply(MakeStatus(kEpoch, {}));
  books_.Reserve("a", 6);
  books_.Reserve("b", 4);
  books_.Reserve("b", 5);  // replaces b's charge
  EXPECT_EQ(books_.reserved_blocks(), 11);
  EXPECT_EQ(books_.outstanding_requests(), 2);

  Apply(MakeStatus(kEpoch, {}));
  EXPECT_EQ(books_.reserved_blocks(), 11) << "not started: reports do not cover it";
  EXPECT_TRUE(books_.MarkStarted("a"));
  EXPECT_FALSE(books_.MarkStarted("nope"));
  Apply(MakeStatus(kEpoch, {}));
  EXPECT_EQ(books_.reserved_blocks(), 11) << "one report after the start is not enough";
  const ApplyResult covered = Apply(MakeStatus(kEpoch, {}));
  EXPECT_TRUE(covered.capacity_changed);
  EXPECT_EQ(books_.reserved_blocks(), 5);
  EXPECT_FALSE(books_.Release("a")) << "already covered";
  EXPECT_TRUE(books_.Release("b"));
  EXPECT_EQ(books_.reserved_blocks(), 0);
  EXPECT_EQ(books_.outstanding_requests(), 0);
}

// A real KvCacheManager with a small pool (so prefixes are evicted all the time), with and
// without a host tier, runs random requests; after every step its drained batch goes through
// Apply, and the books' sets, one per tier, must equal the manager's own snapshot.
class WorkerBooksRealCacheTest : public ::testing::TestWithParam<int> {};

TEST_P(WorkerBooksRealCacheTest, BooksTrackARealKvCacheThroughEvictions) {
  const uint32_t seed = std::random_device()();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << ", host blocks " << GetParam());
  std::mt19937 rng(seed);
  auto manager = *KvCacheManager::Create(
      {.num_blocks = 24, .block_size = 16, .epoch = 3, .num_host_blocks = GetParam()});
  PrefixIndex index;
  PrefixIndex host_index;
  WorkerBooks books("w", 0, 16, 2, &index, &host_index);
  kvserve::v1::WorkerStatus first = MakeStatus(3, {});
  SetSnapshotPart(&first, manager->Snapshot().sequence_number, 0, true, manager->Snapshot().hashes);
  KVSERVE_ASSERT_OK(books.Apply(first));

  std::vector<SequenceId> running;
  SequenceId next_id = 1;
  KvEventBatch batch;
  int applied = 0;
  int removed = 0;
  for (int step = 0; step < 400; ++step) {
    if (!running.empty() && (running.size() >= 3 || rng() % 2 == 0)) {
      const size_t victim = rng() % running.size();
      KVSERVE_ASSERT_OK(manager->FreeSequence(running[victim]));
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(victim));
    } else {
      // One of 4 shared prefixes, then a private tail: hits, misses and evictions.
      std::vector<TokenId> prompt = Range(16 * static_cast<int>(1 + rng() % 4), 1000 * (rng() % 4));
      const std::vector<TokenId> tail = Range(static_cast<int>(1 + rng() % 40), 50000 + step * 64);
      prompt.insert(prompt.end(), tail.begin(), tail.end());
      const int n = static_cast<int>(prompt.size());
      if (manager->AddSequence(next_id, prompt, "", n).ok()) {
        absl::StatusOr<int> computed = manager->GetNumComputedTokens(next_id);
        KVSERVE_ASSERT_OK(computed);
        KVSERVE_ASSERT_OK(manager->CommitComputed(next_id, n - *computed));
        running.push_back(next_id);
      }
      ++next_id;
    }
    manager->DrainEvents(&batch);
    if (batch.events.empty()) continue;
    for (const KvEvent& event : batch.events) removed += event.kind == KvEventKind::kRemoved;
    kvserve::v1::WorkerStatus status = MakeStatus(3, {});
    AddBatch(&status, batch, 16);
    absl::StatusOr<ApplyResult> result = books.Apply(status);
    KVSERVE_ASSERT_OK(result);
    ASSERT_FALSE(result->resync_needed) << "step " << step;
    ++applied;
    const KvSnapshot truth = manager->Snapshot();
    ASSERT_EQ(books.cached_blocks(), static_cast<int64_t>(truth.hashes.size())) << "step " << step;
    for (const BlockHash& hash : truth.hashes) ASSERT_TRUE(index.Holds(0, hash)) << "step " << step;
    ASSERT_EQ(books.host_cached_blocks(), static_cast<int64_t>(truth.host_hashes.size()))
        << "step " << step;
    for (const BlockHash& hash : truth.host_hashes) {
      ASSERT_TRUE(host_index.Holds(0, hash)) << "step " << step;
    }
    ASSERT_EQ(books.last_sequence(), truth.sequence_number);
  }
  EXPECT_GT(applied, 100);
  EXPECT_GT(removed, 50) << "the pool must be small enough to evict";
  if (GetParam() > 0) {
    EXPECT_GT(books.host_cached_blocks(), 0);
    // A fresh router gets both tiers from one snapshot.
    PrefixIndex fresh_index;
    PrefixIndex fresh_host_index;
    WorkerBooks fresh("w", 0, 16, 2, &fresh_index, &fresh_host_index);
    const KvSnapshot truth = manager->Snapshot();
    kvserve::v1::WorkerStatus status = MakeStatus(3, {});
    const std::vector<kvserve::v1::KvSnapshot> parts = SnapshotParts(truth, 16, 5);
    ASSERT_GT(parts.size(), 1u);
    for (const kvserve::v1::KvSnapshot& part : parts) {
      *status.mutable_snapshot() = part;
      KVSERVE_ASSERT_OK(fresh.Apply(status));
    }
    EXPECT_EQ(fresh.sync_state(), KvSyncState::kInSync);
    EXPECT_EQ(fresh.cached_blocks(), books.cached_blocks());
    EXPECT_EQ(fresh.host_cached_blocks(), books.host_cached_blocks());
    for (const BlockHash& hash : truth.host_hashes) EXPECT_TRUE(fresh_host_index.Holds(0, hash));
  }
}

INSTANTIATE_TEST_SUITE_P(HostBlocks, WorkerBooksRealCacheTest, ::testing::Values(0, 12));

}  // namespace
}  // namespace kvserve
