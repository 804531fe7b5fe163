#include "kvcache/host_block_pool.h"

#include <algorithm>
#include <cassert>

#include "absl/strings/str_cat.h"

namespace kvserve {

HostBlockPool::HostBlockPool(int num_blocks, int block_size)
    : block_size_(block_size),
      entries_(num_blocks),
      tokens_(static_cast<size_t>(num_blocks) * block_size),
      lru_(num_blocks) {
  assert(num_blocks >= 1 && block_size > 0);
  index_.reserve(num_blocks);
  pinned_.reserve(num_blocks);
  for (HostBlockId id = 0; id < num_blocks; ++id) lru_.PushBack(id);
}

HostBlockId HostBlockPool::Find(const BlockHash& hash, const BlockHash& parent_hash,
                                absl::Span<const TokenId> tokens) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return kNoHostBlock;
  const HostBlockId id = it->second;
  const auto stored = tokens_.begin() + static_cast<size_t>(id) * block_size_;
  const bool same = entries_[id].parent_hash == parent_hash &&
                    std::equal(tokens.begin(), tokens.end(), stored, stored + block_size_);
  return same ? id : kNoHostBlock;
}

HostBlockId HostBlockPool::Store(const BlockHash& hash, const BlockHash& parent_hash,
                                 absl::Span<const TokenId> tokens) {
  assert(static_cast<int>(tokens.size()) == block_size_);
  if (auto it = index_.find(hash); it != index_.end()) {
    const HostBlockId existing = it->second;
    Entry& entry = entries_[existing];
    const auto stored = tokens_.begin() + static_cast<size_t>(existing) * block_size_;
    if (entry.parent_hash == parent_hash && std::equal(tokens.begin(), tokens.end(), stored)) {
      if (!entry.pinned) {  // most recently used
        lru_.Remove(existing);
        lru_.PushBack(existing);
      }
      return kNoHostBlock;
    }
    if (entry.pinned) return kNoHostBlock;  // a collision being read: keep it
    Drop(existing);
  }
  if (lru_.empty()) return kNoHostBlock;
  const HostBlockId id = lru_.PopFront();
  Entry& entry = entries_[id];
  if (entry.full) {
    index_.erase(entry.hash);
    pending_events_.push_back(KvEvent{
        .kind = KvEventKind::kRemoved, .hash = entry.hash, .block = id, .tier = KvTier::kHost});
  }
  entry.hash = hash;
  entry.parent_hash = parent_hash;
  entry.full = true;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<size_t>(id) * block_size_);
  index_.emplace(hash, id);
  lru_.PushBack(id);
  pending_events_.push_back(
      KvEvent{.kind = KvEventKind::kStored, .hash = hash, .block = id, .tier = KvTier::kHost});
  return id;
}

void HostBlockPool::Pin(HostBlockId id) {
  Entry& entry = entries_[id];
  assert(entry.full);
  if (entry.pinned) return;
  entry.pinned = true;
  lru_.Remove(id);
  pinned_.push_back(id);
}

void HostBlockPool::UnpinAll() {
  for (HostBlockId id : pinned_) {
    entries_[id].pinned = false;
    lru_.PushBack(id);
  }
  pinned_.clear();
}

HostBlockId HostBlockPool::TakeForSwap() {
  if (lru_.empty()) return kNoHostBlock;
  const HostBlockId id = lru_.front();
  if (entries_[id].full) Drop(id);  // the front stays the front
  lru_.Remove(id);
  entries_[id].swap = true;
  ++num_swap_blocks_;
  return id;
}

void HostBlockPool::ReleaseSwap(HostBlockId id) {
  Entry& entry = entries_[id];
  assert(entry.swap && !entry.full);
  entry.swap = false;
  --num_swap_blocks_;
  lru_.PushFront(id);
}

void HostBlockPool::Drop(HostBlockId id) {
  Entry& entry = entries_[id];
  assert(entry.full && !entry.pinned);
  index_.erase(entry.hash);
  entry.full = false;
  lru_.Remove(id);
  lru_.PushFront(id);
  pending_events_.push_back(KvEvent{
      .kind = KvEventKind::kRemoved, .hash = entry.hash, .block = id, .tier = KvTier::kHost});
}

void HostBlockPool::TakeEvents(std::vector<KvEvent>* events) {
  events->clear();
  events->swap(pending_events_);
}

absl::Status HostBlockPool::CheckInvariants() const {
  int num_full = 0;
  int num_pinned = 0;
  for (HostBlockId id = 0; id < num_blocks(); ++id) {
    const Entry& entry = entries_[id];
    num_pinned += entry.pinned;
    if ((entry.pinned || entry.swap) == lru_.Contains(id) || (entry.swap && entry.full)) {
      return absl::InternalError(absl::StrCat("host block ", id, " pinned=", entry.pinned,
                                              " swap=", entry.swap, " full=", entry.full,
                                              " but queued=", lru_.Contains(id)));
    }
    if (!entry.full) continue;
    ++num_full;
    auto it = index_.find(entry.hash);
    if (it == index_.end() || it->second != id) {
      return absl::InternalError(absl::StrCat("host block ", id, " not found by its hash"));
    }
  }
  if (num_full != static_cast<int>(index_.size())) {
    return absl::InternalError(absl::StrCat("host index holds ", index_.size(), " hashes, ",
                                            num_full, " blocks are full"));
  }
  if (num_pinned != static_cast<int>(pinned_.size())) {
    return absl::InternalError(
        absl::StrCat("host pins: ", num_pinned, " pinned blocks, ", pinned_.size(), " listed"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve
