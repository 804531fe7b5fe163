#include "proto/kv_events_conversion.h"

#include <algorithm>

namespace kvserve {

namespace v1 = ::kvserve::v1;

void ToProto(const BlockHash& hash, v1::BlockHash* proto) {
  proto->set_high(hash.high);
  proto->set_low(hash.low);
}

BlockHash FromProto(const v1::BlockHash& proto) {
  return BlockHash{.low = proto.low(), .high = proto.high()};
}

void ToProto(const KvEventBatch& batch, int32_t block_size, v1::KvEventBatch* proto) {
  proto->set_sequence(batch.sequence_number);
  v1::KvEvent* current = nullptr;
  KvEventKind current_kind = KvEventKind::kStored;
  for (const KvEvent& event : batch.events) {
    if (current == nullptr || event.kind != current_kind) {
      current = proto->add_events();
      current_kind = event.kind;
    }
    if (event.kind == KvEventKind::kStored) {
      v1::StoredBlock* block = current->mutable_stored()->add_blocks();
      ToProto(event.hash, block->mutable_hash());
      block->set_num_tokens(block_size);
    } else {
      ToProto(event.hash, current->mutable_removed()->add_hashes());
    }
  }
}

std::vector<v1::KvSnapshot> SnapshotParts(const KvSnapshot& snapshot, int32_t block_size,
                                          int32_t max_blocks_per_part) {
  std::vector<v1::KvSnapshot> parts;
  const size_t per_part = static_cast<size_t>(std::max(max_blocks_per_part, 1));
  size_t next = 0;
  do {
    v1::KvSnapshot& part = parts.emplace_back();
    part.set_sequence(snapshot.sequence_number);
    part.set_part_index(static_cast<int32_t>(parts.size() - 1));
    const size_t end = std::min(snapshot.hashes.size(), next + per_part);
    for (; next < end; ++next) {
      v1::StoredBlock* block = part.add_blocks();
      ToProto(snapshot.hashes[next], block->mutable_hash());
      block->set_num_tokens(block_size);
    }
  } while (next < snapshot.hashes.size());
  parts.back().set_last_part(true);
  return parts;
}

}  // namespace kvserve
