// ClusterBooks: the router's prompt hashes equal those a real KvCacheManager stores; routing
// prefers the worker holding the prefix, spreads unrelated requests, never overbooks a worker,
// skips unhealthy / draining / excluded workers, and migrations prefer the longest prefix.

#include "router/cluster_books.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "proto/kv_events_conversion.h"
#include "tests/router/router_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using testing_util::AddBatch;
using testing_util::CapacitySpec;
using testing_util::MakeStatus;
using testing_util::Range;
using testing_util::SetSnapshotPart;

constexpr int kBlockSize = 16;

std::unique_ptr<ClusterBooks> MakeBooks() {
  absl::StatusOr<std::unique_ptr<ClusterBooks>> books = ClusterBooks::Create(RouterCoreOptions{});
  KVSERVE_EXPECT_OK(books);
  return std::move(*books);
}

// A worker's KV cache that ran `tokens` with `salt` to completion: its blocks are cached.
std::unique_ptr<KvCacheManager> CacheThatRan(const std::vector<TokenId>& tokens,
                                             const std::string& salt, uint64_t epoch) {
  auto manager =
      *KvCacheManager::Create({.num_blocks = 256, .block_size = kBlockSize, .epoch = epoch});
  KVSERVE_EXPECT_OK(manager->AddSequence(1, tokens, salt, static_cast<int>(tokens.size())));
  KVSERVE_EXPECT_OK(manager->CommitComputed(1, static_cast<int>(tokens.size())));
  KVSERVE_EXPECT_OK(manager->FreeSequence(1));
  return manager;
}

// Registers `worker` and feeds it an empty snapshot, then `manager`'s pending events, with the
// given capacity.
void Connect(ClusterBooks& books, const std::string& worker, KvCacheManager* manager,
             const CapacitySpec& capacity, uint64_t epoch) {
  KVSERVE_ASSERT_OK(books.AddWorker(worker));
  kvserve::v1::WorkerStatus status = MakeStatus(epoch, capacity);
  SetSnapshotPart(&status, 0, 0, true, {});
  if (manager != nullptr) {
    KvEventBatch batch;
    manager->DrainEvents(&batch);
    AddBatch(&status, batch, kBlockSize);
  }
  absl::StatusOr<ApplyResult> result = books.ApplyStatus(worker, status);
  KVSERVE_ASSERT_OK(result);
  ASSERT_FALSE(result->resync_needed);
}

RouteRequest Request(const std::string& id, std::vector<TokenId> tokens, int64_t max_tokens,
                     std::string salt = "") {
  return RouteRequest{.request_id = id,
                      .tokens = std::move(tokens),
                      .cache_salt = std::move(salt),
                      .max_tokens = max_tokens};
}

TEST(ClusterBooksTest, PromptHashesEqualTheHashesAKvCacheManagerStores) {
  const std::vector<TokenId> tokens = Range(100, 1000);
  auto manager = *KvCacheManager::Create({.num_blocks = 64, .block_size = kBlockSize, .epoch = 9});
  KVSERVE_ASSERT_OK(manager->AddSequence(1, tokens, "tenant-a", 100));
  KVSERVE_ASSERT_OK(manager->CommitComputed(1, 100));
  KvEventBatch batch;
  manager->DrainEvents(&batch);
  std::vector<BlockHash> stored;
  for (const KvEvent& event : batch.events) {
    if (event.kind == KvEventKind::kStored) stored.push_back(event.hash);
  }
  ASSERT_EQ(stored.size(), 6u);  // 100 / 16 full blocks

  auto books = MakeBooks();
  EXPECT_EQ(books->Prepare(Request("r", tokens, 1, "tenant-a")).block_hashes, stored);
  EXPECT_NE(books->Prepare(Request("r", tokens, 1, "tenant-b")).block_hashes[0], stored[0])
      << "the salt must change block 0's hash";
  EXPECT_NE(books->Prepare(Request("r", tokens, 1)).block_hashes.back(), stored.back())
      << "and, through the chain, every later block's";
}

TEST(ClusterBooksTest, CachedTokensMatchWhatTheWorkerWouldServe) {
  const std::vector<TokenId> tokens = Range(100, 1000);
  auto manager = CacheThatRan(tokens, "tenant-a", 9);
  auto books = MakeBooks();
  Connect(*books, "w0", manager.get(), {}, 9);
  std::vector<TokenId> longer = tokens;
  longer.push_back(7);  // 101 tokens: the 6 cached blocks are all usable
  const RoutingDecision decision =
      books->Route(books->Prepare(Request("r", longer, 1, "tenant-a")));
  ASSERT_EQ(decision.verdict, RouteVerdict::kRouted);
  EXPECT_EQ(decision.cached_tokens, manager->FindCachedPrefix(longer, "tenant-a").num_tokens);
  EXPECT_EQ(decision.cached_tokens, 96);
  const RoutingDecision other_tenant =
      books->Evaluate(books->Prepare(Request("r2", longer, 1, "tenant-b")));
  EXPECT_EQ(other_tenant.cached_tokens, 0);
}

TEST(ClusterBooksTest, PrefersTheWorkerHoldingThePrefix) {
  const std::vector<TokenId> prompt = Range(512, 3);
  auto manager = CacheThatRan(prompt, "", 2);
  auto books = MakeBooks();
  Connect(*books, "cold", nullptr, {}, 1);
  Connect(*books, "warm", manager.get(), {}, 2);
  std::vector<TokenId> follow_up = prompt;
  follow_up.insert(follow_up.end(), {1, 2, 3});
  const RoutingDecision decision = books->Route(books->Prepare(Request("r", follow_up, 16)));
  EXPECT_EQ(decision.worker_id, "warm");
  EXPECT_EQ(decision.cached_tokens, 512);
  EXPECT_EQ(decision.num_candidates, 2);
}

TEST(ClusterBooksTest, UnrelatedRequestsAlternateBetweenEqualWorkers) {
  auto books = MakeBooks();
  Connect(*books, "a", nullptr, {.total = 1000, .free = 1000}, 1);
  Connect(*books, "b", nullptr, {.total = 1000, .free = 1000}, 2);
  std::vector<std::string> chosen;
  for (int i = 0; i < 6; ++i) {
    const RoutingDecision decision = books->Route(
        books->Prepare(Request("r" + std::to_string(i), Range(64, 10000 * (i + 1)), 64)));
    ASSERT_EQ(decision.verdict, RouteVerdict::kRouted);
    chosen.push_back(decision.worker_id);
  }
  EXPECT_EQ(chosen, (std::vector<std::string>{"a", "b", "a", "b", "a", "b"}));
}

TEST(ClusterBooksTest, SequentialRequestsSpreadEvenlyOverAnIdleCluster) {
  // Each request ends (Release) before the next arrives, so every decision sees the same idle
  // workers at the same cost: the least recently chosen one must win, not always the first.
  auto books = MakeBooks();
  const std::vector<std::string> ids = {"a", "b", "c"};
  for (size_t i = 0; i < ids.size(); ++i) {
    Connect(*books, ids[i], nullptr, {.total = 1000, .free = 1000}, static_cast<uint64_t>(i + 1));
  }
  std::map<std::string, int> count;
  for (int i = 0; i < 300; ++i) {
    const std::string request_id = "r" + std::to_string(i);
    const RoutingDecision decision =
        books->Route(books->Prepare(Request(request_id, Range(64, 10000 * (i + 1)), 64)));
    ASSERT_EQ(decision.verdict, RouteVerdict::kRouted);
    ++count[decision.worker_id];
    ASSERT_TRUE(books->Release(request_id));
  }
  EXPECT_EQ(count, (std::map<std::string, int>{{"a", 100}, {"b", 100}, {"c", 100}}));
}

TEST(ClusterBooksTest, ReservationsNeverOverbookAndReleaseWakesTheListener) {
  auto books = MakeBooks();
  std::atomic<int> notified = 0;
  books->SetCapacityListener([&] { ++notified; });
  Connect(*books, "w", nullptr, {.total = 20, .free = 10}, 1);
  notified = 0;
  // 64 + 32 tokens = 6 blocks each; 10 free.
  const PreparedRoute first = books->Prepare(Request("first", Range(64), 32));
  const PreparedRoute second = books->Prepare(Request("second", Range(64, 500), 32));
  EXPECT_EQ(books->Route(first).verdict, RouteVerdict::kRouted);
  EXPECT_EQ(books->Route(second).verdict, RouteVerdict::kNoFitNow);
  EXPECT_EQ(notified, 0);
  EXPECT_TRUE(books->Release("first"));
  EXPECT_EQ(notified, 1);
  EXPECT_FALSE(books->Release("first"));
  EXPECT_EQ(books->Route(second).verdict, RouteVerdict::kRouted);
  EXPECT_EQ(books->Workers()[0].reserved_blocks, 6);
}

// A worker that refused a request with a full waiting queue counts as full until its next
// report: the request (and any waiter) waits instead of going back to it; the report lifts it
// and wakes the listener. A worker that reports no limit cannot be marked.
TEST(ClusterBooksTest, AFullQueueRefusalHoldsTheWorkerUntilItsNextReport) {
  auto books = MakeBooks();
  std::atomic<int> notified = 0;
  books->SetCapacityListener([&] { ++notified; });
  KVSERVE_ASSERT_OK(books->AddWorker("w"));
  kvserve::v1::WorkerStatus status = MakeStatus(1, {.total = 100, .free = 100, .waiting = 1});
  status.mutable_capacity()->set_max_waiting_requests(8);
  SetSnapshotPart(&status, 0, 0, true, {});
  KVSERVE_ASSERT_OK(books->ApplyStatus("w", status));
  const PreparedRoute request = books->Prepare(Request("r", Range(32), 8));
  EXPECT_EQ(books->Route(request).verdict, RouteVerdict::kRouted);
  EXPECT_TRUE(books->Release("r"));
  KVSERVE_ASSERT_OK(books->MarkQueueFull("w"));
  EXPECT_EQ(books->Route(request).verdict, RouteVerdict::kNoFitNow);
  notified = 0;
  kvserve::v1::WorkerStatus next = MakeStatus(1, {.total = 100, .free = 100, .waiting = 1});
  next.mutable_capacity()->set_max_waiting_requests(8);
  KVSERVE_ASSERT_OK(books->ApplyStatus("w", next));
  EXPECT_EQ(notified, 1);
  EXPECT_EQ(books->Route(request).verdict, RouteVerdict::kRouted);
  EXPECT_THAT(books->MarkQueueFull("nobody"), StatusIs(absl::StatusCode::kNotFound));
  Connect(*books, "unlimited", nullptr, {}, 2);  // reports no max_waiting_requests
  EXPECT_THAT(books->MarkQueueFull("unlimited"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ClusterBooksTest, SkipsDrainingUnreachableAndExcludedWorkers) {
  auto books = MakeBooks();
  Connect(*books, "draining", nullptr, {}, 1);
  Connect(*books, "lost", nullptr, {}, 2);
  Connect(*books, "failed", nullptr, {}, 3);
  Connect(*books, "ok", nullptr, {.total = 100, .free = 40, .running = 9}, 4);
  kvserve::v1::WorkerStatus draining = MakeStatus(1, {});
  draining.set_draining(true);
  KVSERVE_ASSERT_OK(books->ApplyStatus("draining", draining));
  KVSERVE_ASSERT_OK(books->MarkUnreachable("lost"));
  RouteRequest request = Request("r", Range(40), 8);
  request.excluded_workers = {"failed"};
  const RoutingDecision decision = books->Route(books->Prepare(request));
  EXPECT_EQ(decision.worker_id, "ok");
  EXPECT_EQ(decision.num_candidates, 1);
  KVSERVE_ASSERT_OK(books->MarkUnreachable("ok"));
  EXPECT_EQ(books->Route(books->Prepare(request)).verdict, RouteVerdict::kNoWorker);
}

TEST(ClusterBooksTest, NeverFitsIsJudgedAgainstTheLargestKnownPool) {
  auto books = MakeBooks();
  Connect(*books, "small", nullptr, {.total = 10, .free = 10}, 1);
  Connect(*books, "big", nullptr, {.total = 100, .free = 0}, 2);
  KVSERVE_ASSERT_OK(books->MarkUnreachable("big"));
  EXPECT_EQ(books->Route(books->Prepare(Request("r", Range(160), 1000))).verdict,
            RouteVerdict::kNoFitNow)
      << "the big worker may come back";
  EXPECT_EQ(books->Route(books->Prepare(Request("r", Range(160), 2000))).verdict,
            RouteVerdict::kNeverFits);
}

TEST(ClusterBooksTest, MigrationGoesToTheLongestPrefixOfPromptPlusGenerated) {
  const std::vector<TokenId> prompt = Range(256, 50);
  std::vector<TokenId> context = prompt;  // prompt + tokens generated before the failure
  for (int i = 0; i < 64; ++i) context.push_back(9000 + i);
  auto prompt_only = CacheThatRan(prompt, "s", 2);
  auto with_generated = CacheThatRan(context, "s", 3);
  auto failed_cache = CacheThatRan(context, "s", 1);  // as good as the best one, but failed
  auto books = MakeBooks();
  Connect(*books, "failed", failed_cache.get(), {}, 1);
  Connect(*books, "prompt-only", prompt_only.get(), {}, 2);
  Connect(*books, "full", with_generated.get(), {.total = 100, .free = 60, .waiting = 3}, 3);
  RouteRequest request = Request("m", context, 100, "s");
  request.excluded_workers = {"failed"};
  request.prefer_longest_prefix = true;
  const RoutingDecision decision = books->Route(books->Prepare(request));
  EXPECT_EQ(decision.worker_id, "full");
  EXPECT_EQ(decision.cached_tokens, 304);  // (320 - 1) / 16 = 19 blocks
}

TEST(ClusterBooksTest, AWorkerRestartDropsTheRequestsItHeld) {
  auto books = MakeBooks();
  Connect(*books, "w", nullptr, {}, 1);
  ASSERT_EQ(books->Route(books->Prepare(Request("r", Range(32), 32))).verdict,
            RouteVerdict::kRouted);
  EXPECT_TRUE(books->MarkStarted("r"));
  absl::StatusOr<ApplyResult> restarted = books->ApplyStatus("w", MakeStatus(2, {}));
  KVSERVE_ASSERT_OK(restarted);
  EXPECT_TRUE(restarted->resync_needed);
  EXPECT_FALSE(books->Release("r"));
  EXPECT_EQ(books->Workers()[0].reserved_blocks, 0);
}

TEST(ClusterBooksTest, RegistryErrors) {
  auto books = MakeBooks();
  KVSERVE_ASSERT_OK(books->AddWorker("w"));
  EXPECT_THAT(books->AddWorker("w"), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(books->ApplyStatus("x", MakeStatus(1, {})), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(books->MarkUnreachable("x"), StatusIs(absl::StatusCode::kNotFound));
  KVSERVE_EXPECT_OK(books->RemoveWorker("w"));
  EXPECT_THAT(books->RemoveWorker("w"), StatusIs(absl::StatusCode::kNotFound));
  for (int i = 0; i < WorkerMask::kMaxWorkers; ++i) {
    KVSERVE_ASSERT_OK(books->AddWorker("w" + std::to_string(i)));
  }
  EXPECT_THAT(books->AddWorker("one-too-many"), StatusIs(absl::StatusCode::kResourceExhausted));
  RouterCoreOptions bad;
  bad.block_size = 12;
  EXPECT_THAT(ClusterBooks::Create(bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

// --- KV block transfer -----------------------------------------------------------------------

// Registers `worker` with `format` as its kv_transfer_format and a snapshot holding the first
// `device` of `hashes` in its pool and the `host` after those in its host tier.
void ConnectHolding(ClusterBooks& books, const std::string& worker, const std::string& format,
                    const std::vector<BlockHash>& hashes, int device, int host,
                    const CapacitySpec& capacity, uint64_t epoch) {
  KVSERVE_ASSERT_OK(books.AddWorker(worker));
  KVSERVE_ASSERT_OK(books.SetKvTransferFormat(worker, format));
  kvserve::v1::WorkerStatus status = MakeStatus(epoch, capacity);
  SetSnapshotPart(&status, 0, 0, true, {});
  for (int i = 0; i < device + host; ++i) {
    kvserve::v1::StoredBlock* block = status.mutable_snapshot()->add_blocks();
    ToProto(hashes[i], block->mutable_hash());
    block->set_tier(i < device ? kvserve::v1::KV_TIER_DEVICE : kvserve::v1::KV_TIER_HOST);
  }
  KVSERVE_ASSERT_OK(books.ApplyStatus(worker, status));
}

// A context of 20 full blocks and 10 tokens more: all 20 blocks can be reused.
RouteRequest TransferRequest(const std::string& id) { return Request(id, Range(330, 7), 16); }

constexpr CapacitySpec kReceiver = {.total = 1000, .free = 1000, .host_blocks = 200};
constexpr CapacitySpec kFull = {.total = 1000, .free = 0, .host_blocks = 200};

TEST(ClusterBooksTest, TheTransferSourceIsTheLongestMatchOfAWorkerThatCanSend) {
  auto books = MakeBooks();
  const std::vector<BlockHash> hashes = books->Prepare(TransferRequest("r")).block_hashes;
  ASSERT_EQ(hashes.size(), 20u);
  // Only "receiver" fits (holding 3 blocks itself); every other worker is a possible source.
  ConnectHolding(*books, "receiver", "fmt", hashes, 3, 0, kReceiver, 1);
  ConnectHolding(*books, "shorter", "fmt", hashes, 12, 0, kFull, 2);
  // The longest that can send: a short pool run continued in its host tier (8 + 8), and
  // draining: it takes no requests but still holds its blocks.
  ConnectHolding(*books, "draining", "fmt", hashes, 8, 8, kFull, 3);
  kvserve::v1::WorkerStatus draining = MakeStatus(3, kFull);
  draining.set_draining(true);
  KVSERVE_ASSERT_OK(books->ApplyStatus("draining", draining));
  // Longer still, but unable to send: an engine that failed, a worker without a format.
  ConnectHolding(*books, "failed", "fmt", hashes, 20, 0, kFull, 4);
  kvserve::v1::WorkerStatus failed = MakeStatus(4, kFull);
  failed.set_failed(true);
  KVSERVE_ASSERT_OK(books->ApplyStatus("failed", failed));
  ConnectHolding(*books, "formatless", "", hashes, 20, 0, kFull, 5);

  const RoutingDecision decision = books->Route(books->Prepare(TransferRequest("r")));
  ASSERT_EQ(decision.verdict, RouteVerdict::kRouted);
  EXPECT_EQ(decision.worker_id, "receiver");
  EXPECT_EQ(decision.transfer_source, "draining");
  EXPECT_EQ(decision.transfer_source_blocks, 16);
  EXPECT_EQ(decision.transfer_blocks, 16 - 3) << "the blocks after the receiver's own";
  EXPECT_EQ(decision.cached_tokens, 3 * 16) << "what the receiver holds itself";
  EXPECT_EQ(decision.charged_blocks, decision.needed_blocks - 3) << "fetched blocks are new";
}

TEST(ClusterBooksTest, AMigrationMayFetchFromTheWorkerThatFailedIt) {
  auto books = MakeBooks();
  const std::vector<BlockHash> hashes = books->Prepare(TransferRequest("m")).block_hashes;
  ConnectHolding(*books, "receiver", "fmt", hashes, 0, 0, kReceiver, 1);
  ConnectHolding(*books, "holder", "fmt", hashes, 20, 0, kReceiver, 2);
  RouteRequest request = TransferRequest("m");
  request.excluded_workers = {"holder"};  // its stream to the request broke; it still serves
  request.prefer_longest_prefix = true;
  RoutingDecision decision = books->Route(books->Prepare(request));
  ASSERT_EQ(decision.verdict, RouteVerdict::kRouted);
  EXPECT_EQ(decision.worker_id, "receiver");
  EXPECT_EQ(decision.transfer_source, "holder");
  EXPECT_EQ(decision.transfer_source_blocks, 20);
  EXPECT_EQ(decision.transfer_blocks, 20);
  // A drained worker hands its blocks over the same way.
  kvserve::v1::WorkerStatus draining = MakeStatus(2, kReceiver);
  draining.set_draining(true);
  KVSERVE_ASSERT_OK(books->ApplyStatus("holder", draining));
  decision = books->Route(books->Prepare(request));
  EXPECT_EQ(decision.transfer_source, "holder");
  // Once its stream is lost, its blocks are gone from the books: nothing to fetch.
  KVSERVE_ASSERT_OK(books->MarkUnreachable("holder"));
  decision = books->Route(books->Prepare(request));
  ASSERT_EQ(decision.verdict, RouteVerdict::kRouted);
  EXPECT_EQ(decision.transfer_source, "");
  EXPECT_EQ(decision.transfer_blocks, 0);
}

TEST(ClusterBooksTest, NoTransferIsPlannedForAWorkerThatCannotReceiveOrWhenItIsOff) {
  for (const bool transfer_on : {true, false}) {
    SCOPED_TRACE(transfer_on ? "kv_transfer on" : "kv_transfer off");
    RouterCoreOptions options;
    options.kv_transfer = transfer_on;
    auto books = *ClusterBooks::Create(options);
    const std::vector<BlockHash> hashes = books->Prepare(TransferRequest("r")).block_hashes;
    ConnectHolding(*books, "source", "fmt", hashes, 20, 0, kFull, 1);
    ConnectHolding(*books, "no-host-tier", "fmt", hashes, 0, 0, {.total = 1000, .free = 1000}, 2);
    ConnectHolding(*books, "other-format", "fmt-2", hashes, 0, 0, kReceiver, 3);
    RoutingDecision decision = books->Route(books->Prepare(TransferRequest("r")));
    ASSERT_EQ(decision.verdict, RouteVerdict::kRouted);
    EXPECT_EQ(decision.transfer_source, "");
    EXPECT_EQ(decision.transfer_source_blocks, 0);
    EXPECT_EQ(decision.transfer_blocks, 0);
    // A worker that can receive gets the blocks only while transfer is on.
    ConnectHolding(*books, "receiver", "fmt", hashes, 0, 0, kReceiver, 4);
    decision = books->Route(books->Prepare(TransferRequest("r2")));
    EXPECT_EQ(decision.transfer_source, transfer_on ? "source" : "");
    EXPECT_EQ(decision.transfer_blocks, transfer_on ? 20 : 0);
  }
}

TEST(ClusterBooksTest, WorkersListTheirTransferFormat) {
  auto books = MakeBooks();
  KVSERVE_ASSERT_OK(books->AddWorker("w"));
  KVSERVE_ASSERT_OK(books->SetKvTransferFormat("w", "fmt"));
  EXPECT_EQ(books->Workers()[0].kv_transfer_format, "fmt");
  EXPECT_THAT(books->SetKvTransferFormat("x", "fmt"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ClusterBooksTest, ConcurrentRoutingNeverReservesMoreThanIsFree) {
  auto books = MakeBooks();
  Connect(*books, "a", nullptr, {.total = 200, .free = 100}, 1);
  Connect(*books, "b", nullptr, {.total = 200, .free = 100}, 2);
  std::atomic<int> routed = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        // 3 blocks each, never released: at most 2 * 33 can be routed.
        if (books->Route(books->Prepare(Request(id, Range(40, t * 1000 + i), 8))).verdict ==
            RouteVerdict::kRouted) {
          ++routed;
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 200; ++i) {
      KVSERVE_ASSERT_OK(books->ApplyStatus("a", MakeStatus(1, {.total = 200, .free = 100})));
    }
  });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(routed, 66);
  for (const WorkerSummary& worker : books->Workers()) EXPECT_LE(worker.reserved_blocks, 100);
}

}  // namespace
}  // namespace kvserve
