// Events the KV cache emits so that routers can keep a copy of which prefixes a worker holds.
//
// A block hash is "stored" when a full block enters the prefix-cache index and "removed" when
// it leaves it (its block is handed out for other tokens). Events come in batches; each batch
// carries the manager's epoch (a random 64-bit value fixed at construction: a new epoch means a
// restarted worker) and a sequence number that grows by one per non-empty batch. A router that
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

struct KvEvent {
  KvEventKind kind = KvEventKind::kStored;
  BlockHash hash;
  BlockId block = kNullBlock;

  friend bool operator==(const KvEvent&, const KvEvent&) = default;
};

struct KvEventBatch {
  uint64_t epoch = 0;
  // 1 for the first non-empty batch; 0 when `events` is empty (nothing happened).
  uint64_t sequence_number = 0;
  std::vector<KvEvent> events;
};

// Every hash in the prefix-cache index after the batch `sequence_number` (0: before any batch)
// was applied. Applying later batches in order to `hashes` tracks the index exactly.
struct KvSnapshot {
  uint64_t epoch = 0;
  uint64_t sequence_number = 0;
  std::vector<BlockHash> hashes;
};

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_KV_EVENTS_H_
