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

v1::KvTier ToProto(KvTier tier) {
  return tier == KvTier::kHost ? v1::KV_TIER_HOST : v1::KV_TIER_DEVICE;
}

KvTier FromProto(v1::KvTier tier) {
  return tier == v1::KV_TIER_DEVICE ? KvTier::kDevice : KvTier::kHost;
}

void ToProto(const KvEventBatch& batch, int32_t block_size, v1::KvEventBatch* proto) {
  proto->set_sequence(batch.sequence_number);
  v1::KvEvent* current = nullptr;
  KvEventKind current_kind = KvEventKind::kStored;
  KvTier current_tier = KvTier::kDevice;
  for (const KvEvent& event : batch.events) {
    // A removal names one tier for all its hashes; stored blocks name theirs each, but a change
    // of tier starts a new event either way, so the order within each tier is kept.
    if (current == nullptr || event.kind != current_kind || event.tier != current_tier) {
      current = proto->add_events();
      current_kind = event.kind;
      current_tier = event.tier;
      if (event.kind == KvEventKind::kRemoved)
        current->mutable_removed()->set_tier(ToProto(event.tier));
    }
    if (event.kind == KvEventKind::kStored) {
      v1::StoredBlock* block = current->mutable_stored()->add_blocks();
      ToProto(event.hash, block->mutable_hash());
      block->set_num_tokens(block_size);
      block->set_tier(ToProto(event.tier));
    } else {
      ToProto(event.hash, current->mutable_removed()->add_hashes());
    }
  }
}

std::vector<v1::KvSnapshot> SnapshotParts(const KvSnapshot& snapshot, int32_t block_size,
                                          int32_t max_blocks_per_part) {
  std::vector<v1::KvSnapshot> parts;
  const size_t per_part = static_cast<size_t>(std::max(max_blocks_per_part, 1));
  // The device's hashes, then the host tier's, as one list split into parts.
  const size_t num_device = snapshot.hashes.size();
  const size_t total = num_device + snapshot.host_hashes.size();
  size_t next = 0;
  do {
    v1::KvSnapshot& part = parts.emplace_back();
    part.set_sequence(snapshot.sequence_number);
    part.set_part_index(static_cast<int32_t>(parts.size() - 1));
    const size_t end = std::min(total, next + per_part);
    for (; next < end; ++next) {
      v1::StoredBlock* block = part.add_blocks();
      const bool host = next >= num_device;
      ToProto(host ? snapshot.host_hashes[next - num_device] : snapshot.hashes[next],
              block->mutable_hash());
      block->set_num_tokens(block_size);
      block->set_tier(host ? v1::KV_TIER_HOST : v1::KV_TIER_DEVICE);
    }
  } while (next < total);
  parts.back().set_last_part(true);
  return parts;
}

}  // namespace kvserve
