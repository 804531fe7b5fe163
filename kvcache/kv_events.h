// Events the KV cache emits so that routers can keep a copy of which prefixes a worker holds.
//
// A block hash is "stored" when a full block enters the prefix-cache index of a tier and
// "removed" when it leaves it: on the device when its block is handed out for other tokens, in
// the host tier (host_block_pool.h) when its entry is reused. Each tier is its own set: a hash
// can be in both (a block copied back from the host stays there too). Events come in batches; each
// batch carries the manager's epoch (a random 64-bit value fixed at construction: a new epoch means
// a restarted worker) and a sequence number that grows by one per non-empty batch. A router that
// sees a gap or a new epoch asks for a snapshot: the full set of hashed blocks as of a batch.
//
// Thread-safety: plain values.

#ifndef KVSERVE_KVCACHE_KV_EVENTS_H_
#define KVSERVE_KVCACHE_KV_EVENTS_H_

#include <cstdint>
#include <vector>

#include "kvcache/block_hash.h"
#include "kvcache/types.h"

namespace kvserve {

enum class KvEventKind { kStored, kRemoved };
// Where a cached block lives: the runner's KV pool, or the host tier under it.
enum class KvTier : uint8_t { kDevice, kHost };

struct KvEvent {
  KvEventKind kind = KvEventKind::kStored;
  BlockHash hash;
  BlockId block = kNullBlock;  // the device block, or the host tier's block id
  KvTier tier = KvTier::kDevice;

  friend bool operator==(const KvEvent&, const KvEvent&) = default;
};

struct KvEventBatch {
  uint64_t epoch = 0;
  // 1 for the first non-empty batch; 0 when `events` is empty (nothing happened).
  uint64_t sequence_number = 0;
  std::vector<KvEvent> events;
};

// Every hash in the prefix-cache index of each tier after the batch `sequence_number` (0:
// before any batch) was applied. Applying later batches in order, each event to its tier's set,
// tracks the indexes exactly.
struct KvSnapshot {
  uint64_t epoch = 0;
  uint64_t sequence_number = 0;
  std::vector<BlockHash> hashes;       // the device pool
  std::vector<BlockHash> host_hashes;  // the host tier (empty without one)
};

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_KV_EVENTS_H_
