// BlockPool: the fixed set of KV cache blocks, their ref counts, the free queue and the
// prefix-cache index.
//
// Block 0 is the null block and is never handed out. Every other block is either in use
// (ref_count > 0, held by that many block tables) or free (ref_count == 0, in the free queue).
// A block that holds a full block of a computed prefix may be "cached": its hash is in the
// index, its token ids are stored here, and it stays cached while free (an evictable prefix
// cache entry) until Allocate hands it out again, which drops the hash and emits a kRemoved
// event. Invariants (checked by CheckInvariants):
//   free queue = { b != 0 : ref_count(b) == 0 };  index = { b : is_cached(b) };
//   num_evictable_blocks = |{ b : is_cached(b) && ref_count(b) == 0 }|.
//
// A cached block also records the block it was chained from (its parent) and that parent's
// generation, a counter bumped each time a block is handed out. A prefix hit is accepted only
// when the hash, the stored token ids and the parent link all match, so a hash collision, or a
// parent whose memory was reused, can never serve wrong K/V (see Matches).
//
// Memory is allocated once, at construction; no operation allocates per block except event
// recording (amortised into a vector whose capacity is reused).
//
// Thread-safety: not thread-safe; owned by the KvCacheManager on the engine thread.

#ifndef KVSERVE_KVCACHE_BLOCK_POOL_H_
#define KVSERVE_KVCACHE_BLOCK_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kvcache/block_hash.h"
#include "kvcache/free_block_queue.h"
#include "kvcache/kv_events.h"
#include "kvcache/types.h"

namespace kvserve {

class BlockPool {
 public:
  // REQUIRES: num_blocks >= 2 (null block + one usable), block_size valid (ValidateBlockSize).
  // With keep_parent_hashes, each cached block also keeps its parent's hash (16 more bytes per
  // block), for a host tier that stores evicted blocks.
  BlockPool(int num_blocks, int block_size, bool keep_parent_hashes = false);

  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(blocks_.size()); }  // null block included
  int block_size() const { return block_size_; }
  int num_free_blocks() const { return free_queue_.size(); }
  int num_evictable_blocks() const { return num_evictable_; }
  int num_cached_blocks() const { return static_cast<int>(index_.size()); }

  int ref_count(BlockId id) const { return blocks_[id].ref_count; }
  bool is_cached(BlockId id) const { return blocks_[id].cached; }
  // REQUIRES: is_cached(id), or id reported evicted by the last Allocate.
  const BlockHash& hash(BlockId id) const { return blocks_[id].hash; }
  // The hash of the block this one was chained from (BlockHash{} for a first block). REQUIRES:
  // as hash(), and keep_parent_hashes.
  const BlockHash& parent_hash(BlockId id) const { return parent_hashes_[id]; }
  uint32_t generation(BlockId id) const { return blocks_[id].generation; }
  // Stored token ids of a cached block. REQUIRES: as hash().
  absl::Span<const TokenId> tokens(BlockId id) const;

  // Hands out `n` blocks with ref count 1, appending them to `*out`, taking the free queue's
  // head first (evicting cached blocks, with kRemoved events). All or nothing: returns
  // RESOURCE_EXHAUSTED and changes nothing when fewer than `n` blocks are free. When `evicted`
  // is given, the handed-out blocks that were cached are appended to it: their hash, parent
  // hash and tokens stay readable until they are cached again (a host tier copies them out).
  absl::Status Allocate(int n, std::vector<BlockId>* out, std::vector<BlockId>* evicted = nullptr);
  // Adds a reference to a block (a free cached block leaves the free queue). REQUIRES: id != 0
  // and (ref_count(id) > 0 or is_cached(id)).
  void Acquire(BlockId id);
  // Drops a reference; at zero the block joins the free queue's tail when cached (kept as
  // prefix cache, most recently used), its head otherwise. REQUIRES: ref_count(id) > 0.
  void Release(BlockId id);

  // The cached block with `hash`, or kNullBlock. The caller must still check Matches.
  BlockId FindHash(const BlockHash& hash) const;
  // True when cached block `id` holds `tokens` and was chained from `parent` at generation
  // `parent_generation` (kNullBlock / 0 for a first block).
  bool Matches(BlockId id, absl::Span<const TokenId> tokens, BlockId parent,
               uint32_t parent_generation) const;
  // Enters in-use block `id` in the index under `hash`, storing its tokens, its parent link and
  // the parent's hash (kept only with keep_parent_hashes); emits kStored. REQUIRES: ref_count(id) >
  // 0, !is_cached(id), FindHash(hash) == kNullBlock, tokens.size() == block_size().
  void Cache(BlockId id, const BlockHash& hash, absl::Span<const TokenId> tokens, BlockId parent,
             uint32_t parent_generation, const BlockHash& parent_hash);

  // Drops free cached block `id` from the index (kRemoved) and moves it to the free queue's
  // head. Used to replace an entry that can no longer be matched. REQUIRES: is_cached(id),
  // ref_count(id) == 0.
  void Evict(BlockId id);

  // Moves the events recorded since the last call into `*events` (cleared first; the two
  // vectors swap storage so that neither reallocates in steady state).
  void TakeEvents(std::vector<KvEvent>* events);
  absl::Span<const KvEvent> pending_events() const { return pending_events_; }

  // Calls fn(id) for every cached block, in no particular order.
  template <typename Fn>
  void ForEachCachedBlock(Fn fn) const {
    for (BlockId id : index_) fn(id);
  }

  // OK when the invariants in the file comment hold, and every cached block whose parent is
  // still the same cached block has hash == HashBlock(parent's hash, tokens, "").
  absl::Status CheckInvariants() const;

  // Bytes of bookkeeping per block: block record, free-queue links and index slot (at the
  // index's current capacity). Token ids of cached blocks are extra: 4 * block_size bytes.
  double BookkeepingBytesPerBlock() const;

 private:
  struct Block {
    BlockHash hash;               // valid when cached
    int32_t ref_count = 0;        // number of block tables holding the block
    BlockId parent = kNullBlock;  // block this one was chained from, when cached
    uint32_t parent_generation = 0;
    uint32_t generation = 0;  // bumped each time the block is handed out
    bool cached = false;      // in index_
  };

  // The index holds block ids and hashes them by their stored BlockHash; lookups by BlockHash
  // are heterogeneous, so an entry costs one 4-byte slot.
  struct IndexHash {
    using is_transparent = void;
    const std::vector<Block>* blocks;
    size_t operator()(BlockId id) const { return (*blocks)[id].hash.low; }
    size_t operator()(const BlockHash& hash) const { return hash.low; }
  };
  struct IndexEq {
    using is_transparent = void;
    const std::vector<Block>* blocks;
    const BlockHash& Get(BlockId id) const { return (*blocks)[id].hash; }
    const BlockHash& Get(const BlockHash& hash) const { return hash; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Get(a) == Get(b);
    }
  };

  void Uncache(BlockId id);

  const int block_size_;
  std::vector<Block> blocks_;             // [num_blocks]
  std::vector<TokenId> tokens_;           // [num_blocks, block_size]; valid for cached blocks
  std::vector<BlockHash> parent_hashes_;  // [num_blocks] with keep_parent_hashes, else empty
  FreeBlockQueue free_queue_;
  absl::flat_hash_set<BlockId, IndexHash, IndexEq> index_;
  int num_evictable_ = 0;
  std::vector<KvEvent> pending_events_;
};

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_BLOCK_POOL_H_
