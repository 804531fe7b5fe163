#include "kvcache/free_block_queue.h"

#include <cassert>

namespace kvserve {

FreeBlockQueue::FreeBlockQueue(int num_blocks)
    : prev_(num_blocks + 1, kUnlinked), next_(num_blocks + 1, kUnlinked) {
  prev_[kHead] = kHead;
  next_[kHead] = kHead;
}

void FreeBlockQueue::LinkBefore(int index, int successor) {
  const int predecessor = prev_[successor];
  prev_[index] = predecessor;
  next_[index] = successor;
  next_[predecessor] = index;
  prev_[successor] = index;
  ++size_;
}

void FreeBlockQueue::PushBack(BlockId id) {
  assert(!Contains(id));
  LinkBefore(id + 1, kHead);
}

void FreeBlockQueue::PushFront(BlockId id) {
  assert(!Contains(id));
  LinkBefore(id + 1, next_[kHead]);
}

void FreeBlockQueue::Remove(BlockId id) {
  const int index = id + 1;
  assert(prev_[index] != kUnlinked);
  next_[prev_[index]] = next_[index];
  prev_[next_[index]] = prev_[index];
  prev_[index] = kUnlinked;
  next_[index] = kUnlinked;
  --size_;
}

BlockId FreeBlockQueue::PopFront() {
  assert(!empty());
  const BlockId id = next_[kHead] - 1;
  Remove(id);
  return id;
}

}  // namespace kvserve
