#include "kvcache/block_pool.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"

namespace kvserve {

BlockPool::BlockPool(int num_blocks, int block_size, bool keep_parent_hashes)
    : block_size_(block_size),
      blocks_(num_blocks),
      tokens_(static_cast<size_t>(num_blocks) * block_size),
      parent_hashes_(keep_parent_hashes ? num_blocks : 0),
      free_queue_(num_blocks),
      index_(0, IndexHash{&blocks_}, IndexEq{&blocks_}) {
  assert(num_blocks >= 2 && block_size > 0);
  // Sized once so that caching a block never rehashes (no allocation in steady state).
  index_.reserve(num_blocks);
  for (BlockId id = 1; id < num_blocks; ++id) free_queue_.PushBack(id);
}

absl::Span<const TokenId> BlockPool::tokens(BlockId id) const {
  return absl::MakeConstSpan(tokens_.data() + static_cast<size_t>(id) * block_size_, block_size_);
}

absl::Status BlockPool::Allocate(int n, std::vector<BlockId>* out, std::vector<BlockId>* evicted) {
  if (n > free_queue_.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache needs ", n, " free blocks, ", free_queue_.size(), " are free"));
  }
  for (int i = 0; i < n; ++i) {
    const BlockId id = free_queue_.PopFront();
    Block& block = blocks_[id];
    if (block.cached) {
      --num_evictable_;
      Uncache(id);
      if (evicted != nullptr) evicted->push_back(id);
    }
    ++block.generation;
    block.ref_count = 1;
    out->push_back(id);
  }
  return absl::OkStatus();
}

void BlockPool::Acquire(BlockId id) {
  Block& block = blocks_[id];
  assert(id != kNullBlock);
  if (block.ref_count == 0) {
    assert(block.cached);
    free_queue_.Remove(id);
    --num_evictable_;
  }
  ++block.ref_count;
}

void BlockPool::Release(BlockId id) {
  Block& block = blocks_[id];
  assert(block.ref_count > 0);
  if (--block.ref_count > 0) return;
  if (block.cached) {
    free_queue_.PushBack(id);
    ++num_evictable_;
  } else {
    free_queue_.PushFront(id);
  }
}

BlockId BlockPool::FindHash(const BlockHash& hash) const {
  auto it = index_.find(hash);
  return it == index_.end() ? kNullBlock : *it;
}

bool BlockPool::Matches(BlockId id, absl::Span<const TokenId> tokens, BlockId parent,
                        uint32_t parent_generation) const {
  const Block& block = blocks_[id];
  return block.cached && block.parent == parent && block.parent_generation == parent_generation &&
         std::equal(tokens.begin(), tokens.end(),
                    tokens_.begin() + static_cast<size_t>(id) * block_size_,
                    tokens_.begin() + (static_cast<size_t>(id) + 1) * block_size_);
}

void BlockPool::Cache(BlockId id, const BlockHash& hash, absl::Span<const TokenId> tokens,
                      BlockId parent, uint32_t parent_generation, const BlockHash& parent_hash) {
  Block& block = blocks_[id];
  assert(block.ref_count > 0);
  assert(!block.cached);
  assert(static_cast<int>(tokens.size()) == block_size_);
  block.hash = hash;
  if (!parent_hashes_.empty()) parent_hashes_[id] = parent_hash;
  block.parent = parent;
  block.parent_generation = parent_generation;
  block.cached = true;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<size_t>(id) * block_size_);
  [[maybe_unused]] const bool inserted = index_.insert(id).second;
  assert(inserted);
  pending_events_.push_back(KvEvent{KvEventKind::kStored, hash, id});
}

void BlockPool::Evict(BlockId id) {
  assert(blocks_[id].cached && blocks_[id].ref_count == 0);
  Uncache(id);
  --num_evictable_;
  free_queue_.Remove(id);
  free_queue_.PushFront(id);
}

void BlockPool::Uncache(BlockId id) {
  Block& block = blocks_[id];
  index_.erase(id);
  block.cached = false;
  pending_events_.push_back(KvEvent{KvEventKind::kRemoved, block.hash, id});
}

void BlockPool::TakeEvents(std::vector<KvEvent>* events) {
  events->clear();
  events->swap(pending_events_);
}

absl::Status BlockPool::CheckInvariants() const {
  const Block& null_block = blocks_[kNullBlock];
  if (null_block.ref_count != 0 || null_block.cached || free_queue_.Contains(kNullBlock)) {
    return absl::InternalError("null block was handed out, cached or queued");
  }
  int num_free = 0;
  int num_evictable = 0;
  int num_cached = 0;
  for (BlockId id = 1; id < num_blocks(); ++id) {
    const Block& block = blocks_[id];
    if (block.ref_count < 0) return absl::InternalError(absl::StrCat("block ", id, " ref < 0"));
    if ((block.ref_count == 0) != free_queue_.Contains(id)) {
      return absl::InternalError(absl::StrCat("block ", id, " has ref count ", block.ref_count,
                                              " but queued=", free_queue_.Contains(id)));
    }
    num_free += block.ref_count == 0;
    if (!block.cached) continue;
    ++num_cached;
    num_evictable += block.ref_count == 0;
    if (FindHash(block.hash) != id) {
      return absl::InternalError(absl::StrCat("cached block ", id, " not found by its hash"));
    }
    const Block& parent = blocks_[block.parent];
    if (block.parent != kNullBlock && parent.cached &&
        parent.generation == block.parent_generation &&
        HashBlock(parent.hash, tokens(id), "") != block.hash) {
      return absl::InternalError(
          absl::StrCat("cached block ", id, " hash does not chain from parent ", block.parent));
    }
  }
  if (num_free != free_queue_.size()) {
    return absl::InternalError(absl::StrCat("free queue holds ", free_queue_.size(), " blocks, ",
                                            num_free, " have ref count 0"));
  }
  if (num_cached != static_cast<int>(index_.size()) || num_evictable != num_evictable_) {
    return absl::InternalError(absl::StrCat("index holds ", index_.size(), " blocks, ", num_cached,
                                            " are cached; evictable ", num_evictable_, " vs ",
                                            num_evictable));
  }
  return absl::OkStatus();
}

double BlockPool::BookkeepingBytesPerBlock() const {
  const double index_bytes = static_cast<double>(index_.capacity()) * (sizeof(BlockId) + 1);
  const double parent_hash_bytes = parent_hashes_.empty() ? 0 : sizeof(BlockHash);
  return sizeof(Block) + 2 * sizeof(int) + parent_hash_bytes + index_bytes / num_blocks();
}

}  // namespace kvserve
