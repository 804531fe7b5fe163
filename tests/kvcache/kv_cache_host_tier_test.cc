// KvCacheManager with a host tier: evicted cached blocks are copied to the host, a prompt whose
// chain continues there gets device blocks filled from it, and every copy, run in the recorded
// order on simulated memory, leaves each computed position holding its own token.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kvcache/kv_cache_manager.h"
#include "tests/kvcache/kv_cache_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::absl::StatusCode;
using ::kvserve::testing::StatusIs;
using namespace ::kvserve::testing_util;  // NOLINT(build/namespaces): test helpers

constexpr int kBlockSize = 4;
constexpr TokenId kGarbage = -1;

std::unique_ptr<KvCacheManager> MakeTiered(int num_blocks, int num_host_blocks) {
  auto manager = KvCacheManager::Create(KvCacheConfig{.num_blocks = num_blocks,
                                                      .block_size = kBlockSize,
                                                      .epoch = 7,
                                                      .num_host_blocks = num_host_blocks});
  KVSERVE_EXPECT_OK(manager);
  return *std::move(manager);
}

// The KV memory a runner would hold, with a token id standing for each slot's K/V: the device
// pool and the host tier, changed only by "forward" writes and the manager's copies.
class TierMemory {
 public:
  TierMemory(int num_blocks, int num_host_blocks)
      : device_(static_cast<size_t>(num_blocks) * kBlockSize, kGarbage),
        host_(static_cast<size_t>(num_host_blocks) * kBlockSize, kGarbage) {}

  // Runs the copies recorded so far, in order, as the runner does before a forward.
  void RunCopies(KvCacheManager& m) {
    std::vector<HostCopy> copies;
    m.TakeHostCopies(&copies);
    for (const HostCopy& copy : copies) {
      TokenId* device = &device_[static_cast<size_t>(copy.device) * kBlockSize];
      TokenId* host = &host_[static_cast<size_t>(copy.host) * kBlockSize];
      if (copy.to_host) {
        std::copy(device, device + kBlockSize, host);
      } else {
        std::copy(host, host + kBlockSize, device);
      }
      ++num_copies_;
    }
  }

  // "Computes" the sequence's next n tokens: writes them to their slots and commits them.
  void Compute(KvCacheManager& m, SequenceId id, int n) {
    RunCopies(m);
    const int first = *m.GetNumComputedTokens(id);
    const absl::Span<const TokenId> tokens = *m.GetTokens(id);
    std::vector<int64_t> slots(n);
    KVSERVE_ASSERT_OK(m.GetSlotMapping(id, first, absl::MakeSpan(slots)));
    for (int k = 0; k < n; ++k) device_[slots[k]] = tokens[first + k];
    KVSERVE_ASSERT_OK(m.CommitComputed(id, n));
  }

  // Every computed position of the sequence reads its own token (after the pending copies).
  ::testing::AssertionResult Holds(KvCacheManager& m, SequenceId id) {
    RunCopies(m);
    const int computed = *m.GetNumComputedTokens(id);
    const absl::Span<const TokenId> tokens = *m.GetTokens(id);
    std::vector<int64_t> slots(computed);
    if (!m.GetSlotMapping(id, 0, absl::MakeSpan(slots)).ok()) {
      return ::testing::AssertionFailure() << "no slots";
    }
    for (int p = 0; p < computed; ++p) {
      if (device_[slots[p]] != tokens[p]) {
        return ::testing::AssertionFailure() << "sequence " << id << " position " << p << " holds "
                                             << device_[slots[p]] << ", expected " << tokens[p];
      }
    }
    return ::testing::AssertionSuccess();
  }

  int num_copies() const { return num_copies_; }

  // KV block transfer: a located block's slots, and a host entry overwritten with them.
  std::vector<TokenId> Read(const KvBlockLocation& location) const {
    const TokenId* block = location.device != kNullBlock
                               ? &device_[static_cast<size_t>(location.device) * kBlockSize]
                               : &host_[static_cast<size_t>(location.host) * kBlockSize];
    return std::vector<TokenId>(block, block + kBlockSize);
  }
  void WriteHost(HostBlockId host, const std::vector<TokenId>& block) {
    std::copy(block.begin(), block.end(), &host_[static_cast<size_t>(host) * kBlockSize]);
  }

 private:
  std::vector<TokenId> device_;  // [num_blocks, block_size]
  std::vector<TokenId> host_;    // [num_host_blocks, block_size]
  int num_copies_ = 0;
};

// Adds the prompt, computes it whole, checks what it reads, and frees it.
SequenceStart Serve(KvCacheManager& m, TierMemory& memory, SequenceId id,
                    const std::vector<TokenId>& prompt) {
  absl::StatusOr<SequenceStart> start = m.AddSequence(id, prompt, "", 1 << 20);
  EXPECT_TRUE(start.ok()) << start.status();
  if (!start.ok()) return {};
  memory.Compute(m, id, start->num_new_tokens);
  EXPECT_TRUE(memory.Holds(m, id));
  KVSERVE_EXPECT_OK(m.FreeSequence(id));
  KVSERVE_EXPECT_OK(m.CheckInvariants());
  return *start;
}

TEST(KvCacheHostTierTest, EvictedBlocksAreCopiedToTheHostAndBackInsteadOfRecomputed) {
  auto m = MakeTiered(/*num_blocks=*/5, /*num_host_blocks=*/8);  // 4 usable device blocks
  TierMemory memory(5, 8);
  const std::vector<TokenId> a = Range(13);       // 3 full blocks + 1 token
  const std::vector<TokenId> b = Range(16, 100);  // 4 blocks: evicts all of a's
  EXPECT_EQ(Serve(*m, memory, 1, a).num_cached_tokens, 0);
  std::vector<HostCopy> copies;
  m->TakeHostCopies(&copies);
  EXPECT_TRUE(copies.empty());
  KVSERVE_ASSERT_OK(m->AddSequence(2, b, "", 1 << 20));
  m->TakeHostCopies(&copies);
  ASSERT_EQ(copies.size(), 3u);  // a's three cached blocks, tail first
  for (const HostCopy& copy : copies) EXPECT_TRUE(copy.to_host);
  EXPECT_EQ(m->Stats().host_cached_blocks, 3);
  // Simulate them: the copies above were taken, so run them by hand on fresh memory.
  memory = TierMemory(5, 8);
  KVSERVE_ASSERT_OK(m->FreeSequence(2));
  KVSERVE_ASSERT_OK(m->CheckInvariants());

  // The whole cached part of `a` now comes from the host tier.
  const PrefixMatch match = m->FindCachedPrefix(a, "");
  EXPECT_EQ(match.num_blocks, 3);
  EXPECT_EQ(match.num_host_blocks, 3);
  absl::StatusOr<SequenceStart> start = m->AddSequence(3, a, "", 1 << 20);
  KVSERVE_ASSERT_OK(start);
  EXPECT_EQ(start->num_cached_tokens, 12);
  EXPECT_EQ(start->num_host_tokens, 12);
  EXPECT_EQ(start->num_new_tokens, 1);
  m->TakeHostCopies(&copies);
  const std::vector<BlockId> table = Table(*m, 3);
  std::vector<HostCopy> loads;
  for (const HostCopy& copy : copies) {
    if (!copy.to_host) loads.push_back(copy);
  }
  ASSERT_EQ(loads.size(), 3u);
  for (int j = 0; j < 3; ++j) EXPECT_EQ(loads[j].device, table[j]);
  // The loaded blocks are the device's cached prefix again.
  EXPECT_EQ(m->FindCachedPrefix(a, "").num_host_blocks, 0);
  EXPECT_EQ(m->FindCachedPrefix(a, "").num_blocks, 3);
  const KvCacheStats stats = m->Stats();
  EXPECT_EQ(stats.prefix_host_hit_tokens, 12);
  EXPECT_EQ(stats.host_loaded_blocks, 3);
  EXPECT_GE(stats.host_stored_blocks, 3);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheHostTierTest, TheChainContinuesFromTheDeviceIntoTheHostTier) {
  auto m = MakeTiered(/*num_blocks=*/6, /*num_host_blocks=*/8);  // 5 usable
  TierMemory memory(6, 8);
  const std::vector<TokenId> a = Range(17);  // 4 full blocks + 1
  Serve(*m, memory, 1, a);
  // A 2-block prompt evicts a's two tail blocks (freed tail first) into the host tier.
  Serve(*m, memory, 2, Range(9, 100));
  const PrefixMatch match = m->FindCachedPrefix(a, "");
  EXPECT_EQ(match.num_blocks, 4);
  EXPECT_EQ(match.num_host_blocks, 2);
  const SequenceStart start = Serve(*m, memory, 3, a);
  EXPECT_EQ(start.num_cached_tokens, 16);
  EXPECT_EQ(start.num_host_tokens, 8);
}

TEST(KvCacheHostTierTest, NoRoomForTheHostHitsChangesNothing) {
  auto m = MakeTiered(/*num_blocks=*/5, /*num_host_blocks=*/8);
  TierMemory memory(5, 8);
  const std::vector<TokenId> a = Range(13);
  Serve(*m, memory, 1, a);
  Serve(*m, memory, 2, Range(16, 100));  // a's blocks now only on the host
  // Hold 3 of the 4 device blocks: a needs 4 (3 loads + 1 new token).
  KVSERVE_ASSERT_OK(m->AddSequence(4, Range(12, 500), "", 1 << 20));
  memory.RunCopies(*m);
  EXPECT_THAT(m->AddSequence(3, a, "", 1 << 20), StatusIs(StatusCode::kResourceExhausted));
  std::vector<HostCopy> copies;
  m->TakeHostCopies(&copies);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(m->host_pool()->num_pinned_blocks(), 0);
  EXPECT_EQ(m->FindCachedPrefix(a, "").num_host_blocks, 3);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

TEST(KvCacheHostTierTest, TheHostTierNeverGrowsPastItsSize) {
  auto m = MakeTiered(/*num_blocks=*/5, /*num_host_blocks=*/3);
  TierMemory memory(5, 3);
  for (SequenceId id = 1; id <= 8; ++id) {
    Serve(*m, memory, id, Range(13, static_cast<TokenId>(id * 1000)));
    EXPECT_LE(m->Stats().host_cached_blocks, 3);
  }
  EXPECT_EQ(m->Stats().host_cached_blocks, 3);
  // The most recent evictions stay: sequence 7's blocks left the device last.
  EXPECT_GT(m->FindCachedPrefix(Range(13, 7000), "").num_host_blocks, 0);
  EXPECT_EQ(m->FindCachedPrefix(Range(13, 1000), "").num_blocks, 0);
}

// KV block transfer: the blocks one cache locates, carried to another cache's host tier by
// ImportHostBlocks, are served there as host hits, and every position reads its own token.
TEST(KvCacheTransferTest, LocatedBlocksImportedElsewhereAreServedAsHostHits) {
  auto source = MakeTiered(/*num_blocks=*/5, /*num_host_blocks=*/8);
  TierMemory source_memory(5, 8);
  const std::vector<TokenId> a = Range(13);  // 3 full blocks + 1
  Serve(*source, source_memory, 1, a);
  Serve(*source, source_memory, 2, Range(9, 100));  // a's last two blocks go to the host
  const std::vector<KvBlockLocation> located = source->LocateBlocks(a, "", 0, 10);
  ASSERT_EQ(located.size(), 3u);
  std::vector<BlockHash> hashes;
  HashFullBlocks(a, kBlockSize, "", &hashes);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(located[i].index, i);
    EXPECT_EQ(located[i].hash, hashes[i]);
  }
  EXPECT_NE(located[0].device, kNullBlock);  // the chain starts in the pool...
  EXPECT_EQ(located[2].device, kNullBlock);  // ...and continues in the host tier
  EXPECT_NE(located[2].host, kNoHostBlock);
  source_memory.RunCopies(*source);

  auto target = MakeTiered(/*num_blocks=*/5, /*num_host_blocks=*/8);
  TierMemory target_memory(5, 8);
  absl::StatusOr<std::vector<HostBlockId>> entries = target->ImportHostBlocks(a, "", 0, 3);
  KVSERVE_ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_NE((*entries)[i], kNoHostBlock);
    target_memory.WriteHost((*entries)[i], source_memory.Read(located[i]));
  }
  KvEventBatch events;
  target->DrainEvents(&events);
  ASSERT_EQ(events.events.size(), 3u);  // the router learns the target holds them
  for (const KvEvent& event : events.events) EXPECT_EQ(event.tier, KvTier::kHost);
  const SequenceStart start = Serve(*target, target_memory, 1, a);  // checks every position
  EXPECT_EQ(start.num_cached_tokens, 12);
  EXPECT_EQ(start.num_host_tokens, 12);
}

TEST(KvCacheTransferTest, LocateCountsTheLastFullBlockAndHonoursTheRange) {
  auto m = MakeTiered(/*num_blocks=*/9, /*num_host_blocks=*/4);
  TierMemory memory(9, 4);
  const std::vector<TokenId> a = Range(16);  // exactly 4 full blocks
  Serve(*m, memory, 1, a);
  EXPECT_EQ(m->FindCachedPrefix(a, "").num_blocks, 3);  // a prompt's last token is computed
  EXPECT_EQ(m->LocateBlocks(a, "", 0, 100).size(), 4u);
  const std::vector<KvBlockLocation> middle = m->LocateBlocks(a, "", 1, 2);
  ASSERT_EQ(middle.size(), 2u);
  EXPECT_EQ(middle[0].index, 1);
  EXPECT_EQ(middle[1].index, 2);
  EXPECT_TRUE(m->LocateBlocks(a, "salted", 0, 100).empty());
  // A sequence that leaves the cached chain ends the run there.
  std::vector<TokenId> b = a;
  b[9] = 999;
  EXPECT_EQ(m->LocateBlocks(b, "", 0, 100).size(), 2u);
  EXPECT_TRUE(m->LocateBlocks(a, "", 4, 100).empty());
  EXPECT_TRUE(m->LocateBlocks(a, "", -1, 100).empty());
}

TEST(KvCacheTransferTest, ImportSkipsHeldBlocksAndStaysWithinTheTier) {
  auto m = MakeTiered(/*num_blocks=*/9, /*num_host_blocks=*/3);
  TierMemory memory(9, 3);
  const std::vector<TokenId> a = Range(21);                              // 5 full blocks
  Serve(*m, memory, 1, std::vector<TokenId>(a.begin(), a.begin() + 9));  // blocks 0, 1 cached
  absl::StatusOr<std::vector<HostBlockId>> entries = m->ImportHostBlocks(a, "", 0, 5);
  KVSERVE_ASSERT_OK(entries);
  // Blocks 0 and 1 are in the pool already; 2, 3, 4 fill the 3-entry tier.
  ASSERT_EQ(entries->size(), 5u);
  EXPECT_EQ((*entries)[0], kNoHostBlock);
  EXPECT_EQ((*entries)[1], kNoHostBlock);
  for (int i = 2; i < 5; ++i) EXPECT_NE((*entries)[i], kNoHostBlock);
  EXPECT_EQ(m->Stats().host_cached_blocks, 3);
  // More blocks than the tier holds: only as many as it holds are taken.
  entries = m->ImportHostBlocks(Range(40, 500), "", 0, 10);
  KVSERVE_ASSERT_OK(entries);
  EXPECT_EQ(entries->size(), 3u);
  EXPECT_LE(m->Stats().host_cached_blocks, 3);
  KVSERVE_EXPECT_OK(m->CheckInvariants());

  EXPECT_THAT(m->ImportHostBlocks(a, "", 3, 3), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(m->ImportHostBlocks(a, "", -1, 1), StatusIs(StatusCode::kInvalidArgument));
  auto untiered = MakeTiered(/*num_blocks=*/9, /*num_host_blocks=*/0);
  EXPECT_THAT(untiered->ImportHostBlocks(a, "", 0, 1), StatusIs(StatusCode::kFailedPrecondition));
}

TEST(KvCacheTransferTest, ImportKeepsTheHeldHeadOfItsChainInTheTier) {
  auto m = MakeTiered(/*num_blocks=*/9, /*num_host_blocks=*/3);
  const std::vector<TokenId> a = Range(13);             // 3 full blocks + 1
  KVSERVE_ASSERT_OK(m->ImportHostBlocks(a, "", 0, 1));  // a's block 0, now the oldest entry
  KVSERVE_ASSERT_OK(m->ImportHostBlocks(Range(8, 700), "", 0, 2));
  // Blocks 1 and 2 need two entries; the least recently used would be a's block 0 itself.
  absl::StatusOr<std::vector<HostBlockId>> entries = m->ImportHostBlocks(a, "", 0, 3);
  KVSERVE_ASSERT_OK(entries);
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0], kNoHostBlock);  // held already
  EXPECT_EQ(m->FindCachedPrefix(a, "").num_host_blocks, 3);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

// Preemption by swap: the partial last block of a preempted sequence is kept in the host tier
// and restored on its return, while its full blocks come back as cached ones; every position
// reads its own token although the pool was reused in between.
TEST(KvCacheSwapTest, APreemptedSequencesPartialBlockComesBack) {
  for (bool swap : {true, false}) {
    SCOPED_TRACE(swap ? "swap" : "recompute");
    auto m = MakeTiered(/*num_blocks=*/6, /*num_host_blocks=*/8);  // 5 usable
    TierMemory memory(6, 8);
    std::vector<TokenId> tokens = Range(10, 500);  // 2 full blocks + 2
    KVSERVE_ASSERT_OK(m->AddSequence(1, tokens, "", 1 << 20));
    memory.Compute(*m, 1, 10);
    tokens.push_back(77);  // the sampled token, not yet computed
    KVSERVE_ASSERT_OK(m->AppendTokens(1, {77}));
    KVSERVE_ASSERT_OK(m->PreemptSequence(1, swap));
    EXPECT_EQ(m->host_pool()->num_swap_blocks(), swap ? 1 : 0);
    KVSERVE_ASSERT_OK(m->CheckInvariants());
    Serve(*m, memory, 2, Range(17, 100));  // takes the whole pool: every block is reused
    absl::StatusOr<SequenceStart> start = m->AddSequence(1, tokens, "", 1 << 20);
    KVSERVE_ASSERT_OK(start);
    EXPECT_EQ(start->num_host_tokens, 8);  // the full blocks, back from the host tier
    EXPECT_EQ(start->num_swapped_tokens, swap ? 2 : 0);
    EXPECT_EQ(start->num_cached_tokens, swap ? 10 : 8);
    EXPECT_EQ(start->num_new_tokens, swap ? 1 : 3);
    EXPECT_TRUE(memory.Holds(*m, 1));
    EXPECT_EQ(m->host_pool()->num_swap_blocks(), 0);
    EXPECT_EQ(m->Stats().swapped_in_tokens, swap ? 2 : 0);
    KVSERVE_EXPECT_OK(m->CheckInvariants());
  }
}

TEST(KvCacheSwapTest, AKeptBlockTheChainNoLongerReachesIsGivenBack) {
  auto m = MakeTiered(/*num_blocks=*/6, /*num_host_blocks=*/2);
  TierMemory memory(6, 2);
  std::vector<TokenId> tokens = Range(10, 500);
  KVSERVE_ASSERT_OK(m->AddSequence(1, tokens, "", 1 << 20));
  memory.Compute(*m, 1, 10);
  KVSERVE_ASSERT_OK(m->PreemptSequence(1, /*swap=*/true));
  // Two other prompts push the first full blocks out of the pool and the one free host entry.
  Serve(*m, memory, 2, Range(17, 100));
  Serve(*m, memory, 3, Range(17, 200));
  absl::StatusOr<SequenceStart> start = m->AddSequence(1, tokens, "", 1 << 20);
  KVSERVE_ASSERT_OK(start);
  EXPECT_EQ(start->num_swapped_tokens, 0);
  EXPECT_EQ(m->host_pool()->num_swap_blocks(), 0);
  EXPECT_TRUE(memory.Holds(*m, 1));
  KVSERVE_EXPECT_OK(m->CheckInvariants());

  KVSERVE_ASSERT_OK(m->FreeSequence(1));

  // The same id with other tokens in the kept block, or another chain before it (cached, so
  // that the prefix reaches the kept block's position), gets none of it.
  for (int changed : {1, 8}) {
    const SequenceId id = 10 + changed;
    std::vector<TokenId> other = Range(10, 300);
    start = m->AddSequence(id, other, "", 1 << 20);
    KVSERVE_ASSERT_OK(start);
    memory.Compute(*m, id, start->num_new_tokens);
    KVSERVE_ASSERT_OK(m->PreemptSequence(id, /*swap=*/true));
    other[changed] += 1000;
    if (changed < 8) Serve(*m, memory, 99, std::vector<TokenId>(other.begin(), other.begin() + 9));
    start = m->AddSequence(id, other, "", 1 << 20);
    KVSERVE_ASSERT_OK(start);
    EXPECT_EQ(start->num_swapped_tokens, 0) << "token " << changed << " changed";
    memory.Compute(*m, id, start->num_new_tokens);
    EXPECT_TRUE(memory.Holds(*m, id));
    KVSERVE_ASSERT_OK(m->FreeSequence(id));
  }
  KVSERVE_EXPECT_OK(m->CheckInvariants());

  // A request that ends while preempted gives its entry back.
  KVSERVE_ASSERT_OK(m->AddSequence(4, Range(6, 900), "", 1 << 20));
  memory.Compute(*m, 4, 6);
  KVSERVE_ASSERT_OK(m->PreemptSequence(4, /*swap=*/true));
  EXPECT_EQ(m->host_pool()->num_swap_blocks(), 1);
  m->DropSwapped(4);
  EXPECT_EQ(m->host_pool()->num_swap_blocks(), 0);
  KVSERVE_EXPECT_OK(m->CheckInvariants());
}

// Random conversations that share prefixes and outgrow the device pool many times over: after
// every admission, with the copies run in the recorded order, each computed position of each
// live sequence holds its own token, and the host tier served some of them.
TEST(KvCacheHostTierTest, RandomSharedPrefixesAlwaysReadTheirOwnTokens) {
  std::mt19937 rng(1234);
  for (int host_blocks : {0, 2, 6, 40}) {
    SCOPED_TRACE(absl::StrCat("host blocks ", host_blocks));
    auto m = MakeTiered(/*num_blocks=*/12, host_blocks);
    TierMemory memory(12, std::max(host_blocks, 1));
    // Conversations: each turn extends the previous one's prompt.
    std::vector<std::vector<TokenId>> conversations(6);
    for (size_t c = 0; c < conversations.size(); ++c) {
      conversations[c] = Range(5, static_cast<TokenId>(c * 10000));
    }
    std::vector<SequenceId> live;
    SequenceId next_id = 1;
    for (int step = 0; step < 600; ++step) {
      if (!live.empty() && (live.size() >= 3 || rng() % 3 == 0)) {
        const size_t k = rng() % live.size();
        ASSERT_TRUE(memory.Holds(*m, live[k]));
        KVSERVE_ASSERT_OK(m->FreeSequence(live[k]));
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      std::vector<TokenId>& conversation = conversations[rng() % conversations.size()];
      if (conversation.size() > 40) conversation.resize(5);  // a new conversation
      const int turn = 1 + static_cast<int>(rng() % 7);
      for (int t = 0; t < turn; ++t) conversation.push_back(static_cast<TokenId>(rng() % 50));
      const SequenceId id = next_id++;
      absl::StatusOr<SequenceStart> start = m->AddSequence(id, conversation, "", 1 << 20);
      if (!start.ok()) {
        ASSERT_EQ(start.status().code(), StatusCode::kResourceExhausted);
        continue;
      }
      ASSERT_TRUE(memory.Holds(*m, id));
      memory.Compute(*m, id, start->num_new_tokens);
      ASSERT_TRUE(memory.Holds(*m, id));
      for (SequenceId other : live) ASSERT_TRUE(memory.Holds(*m, other));
      live.push_back(id);
      KVSERVE_ASSERT_OK(m->CheckInvariants());
    }
    const KvCacheStats stats = m->Stats();
    EXPECT_LE(stats.host_cached_blocks, host_blocks);
    if (host_blocks >= 6) {
      EXPECT_GT(stats.prefix_host_hit_tokens, 0);
    }
    if (host_blocks == 0) {
      EXPECT_EQ(memory.num_copies(), 0);
    }
  }
}

}  // namespace
}  // namespace kvserve
