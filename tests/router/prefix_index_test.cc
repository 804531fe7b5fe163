// PrefixIndex: idempotent insert / remove, per-worker counts, clearing one worker, and the
// longest-prefix match for many workers at once (including slots past the first mask word).

#include "router/prefix_index.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/router/router_test_util.h"

namespace kvserve {
namespace {

using testing_util::FakeChain;
using testing_util::FakeHash;

WorkerMask MaskOf(std::initializer_list<int> slots) {
  WorkerMask mask;
  for (int slot : slots) mask.Set(slot);
  return mask;
}

TEST(WorkerMaskTest, SetClearTestCountAndIterateAcrossWords) {
  WorkerMask mask = MaskOf({0, 63, 64, 200, 255});
  EXPECT_EQ(mask.Count(), 5);
  EXPECT_TRUE(mask.Test(200));
  mask.Clear(200);
  EXPECT_FALSE(mask.Test(200));
  std::vector<int> members;
  mask.ForEach([&](int slot) { members.push_back(slot); });
  EXPECT_EQ(members, (std::vector<int>{0, 63, 64, 255}));
  EXPECT_EQ((mask & MaskOf({63, 100})).Count(), 1);
  EXPECT_EQ(mask.AndNot(MaskOf({0, 64})).Count(), 2);
  EXPECT_TRUE(WorkerMask().Empty());
}

TEST(PrefixIndexTest, InsertAndRemoveAreIdempotentAndCounted) {
  PrefixIndex index;
  EXPECT_TRUE(index.Insert(3, FakeHash(1)));
  EXPECT_FALSE(index.Insert(3, FakeHash(1)));
  EXPECT_TRUE(index.Insert(7, FakeHash(1)));
  EXPECT_EQ(index.size(), 1u);
  EXPECT_EQ(index.CountFor(3), 1);
  EXPECT_TRUE(index.Remove(3, FakeHash(1)));
  EXPECT_FALSE(index.Remove(3, FakeHash(1)));
  EXPECT_FALSE(index.Holds(3, FakeHash(1)));
  EXPECT_TRUE(index.Holds(7, FakeHash(1)));
  EXPECT_EQ(index.CountFor(3), 0);
  EXPECT_TRUE(index.Remove(7, FakeHash(1)));
  EXPECT_EQ(index.size(), 0u) << "an entry with no holder must be erased";
}

TEST(PrefixIndexTest, ClearWorkerForgetsOnlyThatWorker) {
  PrefixIndex index;
  for (const BlockHash& hash : FakeChain(10)) index.Insert(1, hash);
  for (const BlockHash& hash : FakeChain(5)) index.Insert(2, hash);
  index.ClearWorker(1);
  EXPECT_EQ(index.CountFor(1), 0);
  EXPECT_EQ(index.CountFor(2), 5);
  EXPECT_EQ(index.size(), 5u);
  for (const BlockHash& hash : FakeChain(5)) EXPECT_TRUE(index.Holds(2, hash));
}

TEST(PrefixIndexTest, MatchPrefixGivesEachWorkerItsLeadingRun) {
  PrefixIndex index;
  const std::vector<BlockHash> prompt = FakeChain(8);
  for (int i = 0; i < 8; ++i) index.Insert(0, prompt[i]);    // whole prompt
  for (int i = 0; i < 3; ++i) index.Insert(1, prompt[i]);    // first 3
  for (int i = 1; i < 8; ++i) index.Insert(2, prompt[i]);    // all but block 0: matches 0
  for (int i = 0; i < 5; ++i) index.Insert(130, prompt[i]);  // second mask word
  index.Insert(131, prompt[0]);                              // not a candidate
  std::vector<int> matched;
  const int longest = index.MatchPrefix(prompt, MaskOf({0, 1, 2, 130, 200}), &matched);
  EXPECT_EQ(longest, 8);
  EXPECT_EQ(matched[0], 8);
  EXPECT_EQ(matched[1], 3);
  EXPECT_EQ(matched[2], 0);
  EXPECT_EQ(matched[130], 5);
  EXPECT_EQ(matched[131], 0) << "non-candidates are not matched";
  EXPECT_EQ(matched[200], 0);
}

TEST(PrefixIndexTest, MatchPrefixOfUnknownOrEmptyPromptIsZero) {
  PrefixIndex index;
  index.Insert(0, FakeHash(99));
  std::vector<int> matched;
  EXPECT_EQ(index.MatchPrefix(FakeChain(4), MaskOf({0}), &matched), 0);
  EXPECT_EQ(index.MatchPrefix({}, MaskOf({0}), &matched), 0);
  EXPECT_EQ(matched[0], 0);
}

TEST(PrefixIndexTest, CountRunCountsTheHeldRunFromAnIndex) {
  PrefixIndex host;
  const std::vector<BlockHash> prompt = FakeChain(8);
  for (int i = 2; i < 6; ++i) host.Insert(0, prompt[i]);  // blocks 2..5 (a host tier's run)
  host.Insert(0, prompt[7]);                              // after a gap: not part of it
  EXPECT_EQ(host.CountRun(0, prompt, 2), 4);
  EXPECT_EQ(host.CountRun(0, prompt, 0), 0) << "a run starts where the pool's match ended";
  EXPECT_EQ(host.CountRun(0, prompt, 7), 1);
  EXPECT_EQ(host.CountRun(0, prompt, 8), 0);
  EXPECT_EQ(host.CountRun(1, prompt, 2), 0) << "another worker";
}

}  // namespace
}  // namespace kvserve
