// FreeBlockQueue: the blocks with ref count 0, in eviction order (head = evicted first).
//
// An intrusive doubly-linked list over block ids: two link arrays sized once at construction,
// so push, pop and removal from the middle are O(1) and never allocate. The block pool keeps
// it in LRU order: a freed block that still holds a cached prefix joins the tail (most recently
// used), a freed block with nothing worth keeping joins the head; a cached block that a new
// sequence reuses is removed from wherever it is.
//
// Thread-safety: not thread-safe; owned by the block pool (one engine thread).

#ifndef KVSERVE_KVCACHE_FREE_BLOCK_QUEUE_H_
#define KVSERVE_KVCACHE_FREE_BLOCK_QUEUE_H_

#include <vector>

#include "kvcache/types.h"

namespace kvserve {

class FreeBlockQueue {
 public:
  // An empty queue for block ids in [0, num_blocks).
  explicit FreeBlockQueue(int num_blocks);

  FreeBlockQueue(const FreeBlockQueue&) = delete;
  FreeBlockQueue& operator=(const FreeBlockQueue&) = delete;

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // REQUIRES: 0 <= id < num_blocks.
  bool Contains(BlockId id) const { return prev_[id + 1] != kUnlinked; }
  // The block that PopFront would return. REQUIRES: !empty().
  BlockId front() const { return next_[kHead] - 1; }

  // REQUIRES: !Contains(id).
  void PushBack(BlockId id);
  void PushFront(BlockId id);
  // REQUIRES: Contains(id).
  void Remove(BlockId id);
  // REQUIRES: !empty().
  BlockId PopFront();

  // Calls fn(id) from head to tail.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (int i = next_[kHead]; i != kHead; i = next_[i]) fn(static_cast<BlockId>(i - 1));
  }

 private:
  // Index 0 of the link arrays is a sentinel; block id b lives at index b + 1.
  static constexpr int kHead = 0;
  static constexpr int kUnlinked = -1;

  void LinkBefore(int index, int successor);

  std::vector<int> prev_;  // [num_blocks + 1]; kUnlinked when not queued
  std::vector<int> next_;  // [num_blocks + 1]
  int size_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_FREE_BLOCK_QUEUE_H_
