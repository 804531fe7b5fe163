#include "tests/router/router_test_util.h"

#include "proto/kv_events_conversion.h"

namespace kvserve::testing_util {
namespace {

namespace v1 = ::kvserve::v1;

}  // namespace

v1::WorkerStatus MakeStatus(uint64_t epoch, const CapacitySpec& capacity) {
  v1::WorkerStatus status;
  status.mutable_identity()->set_worker_id("test");
  status.set_epoch(epoch);
  v1::Capacity* proto = status.mutable_capacity();
  proto->set_block_size(capacity.block_size);
  proto->set_total_blocks(capacity.total);
  proto->set_free_blocks(capacity.free);
  proto->set_evictable_blocks(capacity.evictable);
  proto->set_used_blocks(capacity.total - capacity.free);
  proto->set_running_requests(capacity.running);
  proto->set_waiting_requests(capacity.waiting);
  proto->set_host_blocks(capacity.host_blocks);
  return status;
}

void SetSnapshotPart(v1::WorkerStatus* status, uint64_t sequence, int32_t part_index,
                     bool last_part, const std::vector<BlockHash>& hashes) {
  v1::KvSnapshot* part = status->mutable_snapshot();
  part->set_sequence(sequence);
  part->set_part_index(part_index);
  part->set_last_part(last_part);
  for (const BlockHash& hash : hashes) ToProto(hash, part->add_blocks()->mutable_hash());
}

void AddBatch(v1::WorkerStatus* status, uint64_t sequence, const std::vector<BlockHash>& stored,
              const std::vector<BlockHash>& removed) {
  v1::KvEventBatch* batch = status->add_event_batches();
  batch->set_sequence(sequence);
  if (!stored.empty()) {
    v1::BlocksStored* event = batch->add_events()->mutable_stored();
    for (const BlockHash& hash : stored) {
      v1::StoredBlock* block = event->add_blocks();
      ToProto(hash, block->mutable_hash());
      block->set_num_tokens(16);
    }
  }
  if (!removed.empty()) {
    v1::BlocksRemoved* event = batch->add_events()->mutable_removed();
    for (const BlockHash& hash : removed) ToProto(hash, event->add_hashes());
  }
}

void AddClearBatch(v1::WorkerStatus* status, uint64_t sequence) {
  v1::KvEventBatch* batch = status->add_event_batches();
  batch->set_sequence(sequence);
  batch->add_events()->mutable_all_cleared();
}

void AddBatch(v1::WorkerStatus* status, const KvEventBatch& batch, int32_t block_size) {
  ToProto(batch, block_size, status->add_event_batches());
}

BlockHash FakeHash(uint64_t i, uint64_t salt) { return BlockHash{.low = i + 1, .high = salt}; }

std::vector<BlockHash> FakeChain(int n, uint64_t salt) {
  std::vector<BlockHash> chain;
  for (int i = 0; i < n; ++i) chain.push_back(FakeHash(static_cast<uint64_t>(i), salt));
  return chain;
}

std::vector<TokenId> Range(int n, TokenId first) {
  std::vector<TokenId> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(first + i);
  return tokens;
}

}  // namespace kvserve::testing_util
