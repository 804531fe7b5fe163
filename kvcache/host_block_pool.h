// HostBlockPool: the bookkeeping of a worker's host-memory KV tier, the second tier under the
// device pool (BlockPool). A full, cached device block that the device pool hands out for other
// tokens is copied here instead of being dropped, and a later prompt whose hash chain continues
// past the device's cached prefix copies it back instead of recomputing it. The memory itself
// belongs to the runner (one buffer of num_blocks blocks, every layer, K and V); this class only
// decides which host block holds which prefix block.
//
// Every entry is either empty or holds one block: its hash, its parent's hash (the hash of the
// block before it in the chain; zero for a first block) and its token ids. A lookup is accepted
// only when all three match what the prompt gives, so a hash collision can never serve wrong
// K/V (the device pool's rule, with the parent named by hash: host entries outlive the device
// blocks they came from). Unpinned entries, empty ones first, sit in an LRU queue; Store takes
// the queue's head. The entries a prompt hits are pinned (out of the queue) while the manager
// allocates the device blocks they go to, so the evictions that allocation stores cannot take
// them; once their loads are recorded, later stores may (the runner copies in recorded order).
//
// Memory is allocated once, at construction.
//
// Thread-safety: not thread-safe; owned by the KvCacheManager on the engine thread.
#ifndef KVSERVE_KVCACHE_HOST_BLOCK_POOL_H_
#define KVSERVE_KVCACHE_HOST_BLOCK_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kvcache/block_hash.h"
#include "kvcache/free_block_queue.h"
#include "kvcache/kv_events.h"
#include "kvcache/types.h"

namespace kvserve {

// Index of a block in the host tier, 0 .. num_blocks - 1 (there is no null host block).
using HostBlockId = int32_t;
inline constexpr HostBlockId kNoHostBlock = -1;

class HostBlockPool {
 public:
  // REQUIRES: num_blocks >= 1, block_size valid (ValidateBlockSize).
  HostBlockPool(int num_blocks, int block_size);

  HostBlockPool(const HostBlockPool&) = delete;
  HostBlockPool& operator=(const HostBlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(entries_.size()); }
  int num_cached_blocks() const { return static_cast<int>(index_.size()); }
  int num_pinned_blocks() const { return static_cast<int>(pinned_.size()); }

  // The entry holding `hash` with exactly `tokens`, chained from `parent_hash`; kNoHostBlock
  // when there is none (or a colliding entry holds other tokens or another parent).
  HostBlockId Find(const BlockHash& hash, const BlockHash& parent_hash,
                   absl::Span<const TokenId> tokens) const;

  // Makes room for a block leaving the device and enters it: returns the entry the caller must
  // copy the block's K/V into. Returns kNoHostBlock, changing nothing, when an entry already
  // holds this block (it becomes the most recently used: no copy is needed) or when every entry
  // is pinned. Otherwise takes the least recently used unpinned entry, dropping what it held (a
  // colliding entry under the same hash is dropped too, unless pinned: then kNoHostBlock).
  // REQUIRES: tokens.size() == block_size.
  HostBlockId Store(const BlockHash& hash, const BlockHash& parent_hash,
                    absl::Span<const TokenId> tokens);

  // Pins entry `id` (Store never takes it) until UnpinAll, which makes it the most recently
  // used. REQUIRES: id holds a block.
  void Pin(HostBlockId id);
  // Unpins every pinned entry (their loads are recorded).
  void UnpinAll();

  // Preemption by swap: takes the least recently used unpinned entry out of the tier (dropping
  // what it held) to keep a preempted sequence's partial last block, which no hash names; it
  // stays out of the index and the queue until ReleaseSwap, which makes it the next entry Store
  // takes. kNoHostBlock when every entry is pinned or taken.
  HostBlockId TakeForSwap();
  void ReleaseSwap(HostBlockId id);
  int num_swap_blocks() const { return num_swap_blocks_; }

  // Moves the events recorded since the last call into `*events` (cleared first): kStored
  // when Store enters a block, kRemoved when an entry is dropped or reused; tier kHost, block =
  // the host block id.
  void TakeEvents(std::vector<KvEvent>* events);
  absl::Span<const KvEvent> pending_events() const { return pending_events_; }
  // Calls fn(hash) for every block the tier holds, in no particular order.
  template <typename Fn>
  void ForEachCachedHash(Fn fn) const {
    for (const auto& [hash, id] : index_) fn(hash);
  }

  // OK when the index names exactly the full entries, every entry neither pinned nor taken for
  // a swap is queued once, and the pin count is right. O(num_blocks); for tests.
  absl::Status CheckInvariants() const;

 private:
  struct Entry {
    BlockHash hash;
    BlockHash parent_hash;
    bool pinned = false;
    bool full = false;
    bool swap = false;  // taken by TakeForSwap
  };

  void Drop(HostBlockId id);  // REQUIRES: full, unpinned; moves it to the queue's head

  const int block_size_;
  std::vector<Entry> entries_;   // [num_blocks]
  std::vector<TokenId> tokens_;  // [num_blocks, block_size]; valid for full entries
  FreeBlockQueue lru_;           // unpinned entries, least recently used (or empty) first
  absl::flat_hash_map<BlockHash, HostBlockId> index_;
  std::vector<HostBlockId> pinned_;  // entries with pinned set, each once
  int num_swap_blocks_ = 0;
  std::vector<KvEvent> pending_events_;
};

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_HOST_BLOCK_POOL_H_
