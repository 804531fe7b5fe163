// Conversion between kvcache's event and hash types (kvcache/kv_events.h, kvcache/block_hash.h)
// and their kvserve.v1 messages (kv_events.proto). The worker encodes with it, the router
// decodes with it, and router tests build status messages with it, so all three agree on one
// encoding. A library beside the generated code: kvserve_kv_events_proto links kvserve_proto
// and kvserve_kvcache (kvcache itself stays free of protobuf).
//
// Thread-safety: pure functions.
#ifndef KVSERVE_PROTO_KV_EVENTS_CONVERSION_H_
#define KVSERVE_PROTO_KV_EVENTS_CONVERSION_H_

#include <cstdint>
#include <vector>

#include "kvcache/block_hash.h"
#include "kvcache/kv_events.h"
#include "kvserve/v1/kv_events.pb.h"

namespace kvserve {

void ToProto(const BlockHash& hash, kvserve::v1::BlockHash* proto);
BlockHash FromProto(const kvserve::v1::BlockHash& proto);
kvserve::v1::KvTier ToProto(KvTier tier);
// A tier this build does not know (a newer worker's, slower than the pool) reads as the host
// tier: the router credits its hits as copies, never as free device hits.
KvTier FromProto(kvserve::v1::KvTier tier);

// An event batch as one proto batch: consecutive events of one kind become one KvEvent; every
// stored block holds block_size tokens.
void ToProto(const KvEventBatch& batch, int32_t block_size, kvserve::v1::KvEventBatch* proto);

// A snapshot split into parts of at most `max_blocks_per_part` blocks (at least one part, even
// when empty; the last has last_part set), each ready to go into its own WorkerStatus.
std::vector<kvserve::v1::KvSnapshot> SnapshotParts(const KvSnapshot& snapshot, int32_t block_size,
                                                   int32_t max_blocks_per_part);

}  // namespace kvserve

#endif  // KVSERVE_PROTO_KV_EVENTS_CONVERSION_H_
