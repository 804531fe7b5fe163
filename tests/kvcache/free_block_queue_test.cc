#include "kvcache/free_block_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <random>
#include <vector>

namespace kvserve {
namespace {

std::vector<BlockId> Contents(const FreeBlockQueue& queue) {
  std::vector<BlockId> ids;
  queue.ForEach([&](BlockId id) { ids.push_back(id); });
  return ids;
}

TEST(FreeBlockQueueTest, KeepsInsertionOrderAtBothEnds) {
  FreeBlockQueue queue(8);
  EXPECT_TRUE(queue.empty());
  queue.PushBack(3);
  queue.PushBack(5);
  queue.PushFront(1);
  EXPECT_EQ(Contents(queue), (std::vector<BlockId>{1, 3, 5}));
  EXPECT_EQ(queue.size(), 3);
  EXPECT_EQ(queue.front(), 1);
  EXPECT_TRUE(queue.Contains(3));
  EXPECT_FALSE(queue.Contains(0));
}

TEST(FreeBlockQueueTest, RemovesFromTheMiddleAndPopsFromTheHead) {
  FreeBlockQueue queue(8);
  for (BlockId id : {0, 2, 4, 6}) queue.PushBack(id);
  queue.Remove(4);
  EXPECT_FALSE(queue.Contains(4));
  EXPECT_EQ(Contents(queue), (std::vector<BlockId>{0, 2, 6}));
  EXPECT_EQ(queue.PopFront(), 0);
  queue.Remove(6);
  EXPECT_EQ(queue.PopFront(), 2);
  EXPECT_TRUE(queue.empty());
  queue.PushFront(4);  // a removed block can come back
  EXPECT_EQ(Contents(queue), (std::vector<BlockId>{4}));
}

TEST(FreeBlockQueueTest, AgreesWithAListUnderRandomOperations) {
  constexpr int kBlocks = 64;
  std::mt19937 rng(7);
  FreeBlockQueue queue(kBlocks);
  std::list<BlockId> reference;
  for (int step = 0; step < 20000; ++step) {
    const BlockId id = static_cast<BlockId>(rng() % kBlocks);
    const bool present = std::find(reference.begin(), reference.end(), id) != reference.end();
    ASSERT_EQ(queue.Contains(id), present);
    switch (rng() % 4) {
      case 0:
        if (!present) queue.PushBack(id), reference.push_back(id);
        break;
      case 1:
        if (!present) queue.PushFront(id), reference.push_front(id);
        break;
      case 2:
        if (present) queue.Remove(id), reference.remove(id);
        break;
      default:
        if (!reference.empty()) {
          ASSERT_EQ(queue.PopFront(), reference.front());
          reference.pop_front();
        }
    }
    ASSERT_EQ(queue.size(), static_cast<int>(reference.size()));
  }
  EXPECT_EQ(Contents(queue), std::vector<BlockId>(reference.begin(), reference.end()));
}

}  // namespace
}  // namespace kvserve
