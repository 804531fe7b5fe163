#include "router/worker_books.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/kv_events_conversion.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

WorkerCapacity FromProto(const v1::Capacity& proto) {
  WorkerCapacity capacity;
  capacity.block_size = proto.block_size();
  capacity.total_blocks = proto.total_blocks();
  capacity.free_blocks = proto.free_blocks();
  capacity.evictable_blocks = proto.evictable_blocks();
  capacity.used_blocks = proto.used_blocks();
  capacity.running_requests = proto.running_requests();
  capacity.waiting_requests = proto.waiting_requests();
  capacity.max_waiting_requests = proto.max_waiting_requests();
  capacity.host_blocks = proto.host_blocks();
  capacity.host_cached_blocks = proto.host_cached_blocks();
  return capacity;
}

}  // namespace

std::string_view WorkerHealthName(WorkerHealth health) {
  switch (health) {
    case WorkerHealth::kHealthy:
      return "healthy";
    case WorkerHealth::kDraining:
      return "draining";
    case WorkerHealth::kFailed:
      return "failed";
    case WorkerHealth::kUnreachable:
      return "unreachable";
    case WorkerHealth::kRefused:
      return "refused";
  }
  return "unknown";
}

WorkerBooks::WorkerBooks(std::string worker_id, int slot, int block_size, int reports_to_cover,
                         PrefixIndex* index, PrefixIndex* host_index)
    : worker_id_(std::move(worker_id)),
      slot_(slot),
      block_size_(block_size),
      reports_to_cover_(reports_to_cover),
      index_(index),
      host_index_(host_index) {}

void WorkerBooks::ClearIndexes() {
  index_->ClearWorker(slot_);
  host_index_->ClearWorker(slot_);
}

PrefixIndex& WorkerBooks::IndexFor(v1::KvTier tier) {
  return FromProto(tier) == KvTier::kDevice ? *index_ : *host_index_;
}

absl::StatusOr<ApplyResult> WorkerBooks::Apply(const v1::WorkerStatus& status) {
  if (status.epoch() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", worker_id_, ": epoch is 0"));
  }
  if (status.has_capacity() && status.capacity().block_size() != block_size_) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id_, ": block size ",
                                                      status.capacity().block_size(),
                                                      " differs from the router's ", block_size_));
  }
  ApplyResult result;
  last_report_ = absl::Now();
  if (status.epoch() != epoch_) {
    const bool restarted = epoch_ != 0;
    epoch_ = status.epoch();
    if (restarted) {
      reservations_.clear();
      reserved_blocks_ = 0;
      reports_received_ = 0;
      result.capacity_changed = true;
      // The old view is void; a snapshot in this very message starts the new one.
      const bool has_fresh_snapshot = status.has_snapshot() && status.snapshot().part_index() == 0;
      if (has_fresh_snapshot) {
        ClearIndexes();
        sync_ = KvSyncState::kAwaitingSnapshot;
      } else {
        resync_requested_ = false;  // a new epoch always asks again
        LoseSync(&result);
      }
    }
  }

  if (status.has_identity() && !status.identity().worker_id().empty()) {
    reported_id_ = status.identity().worker_id();
  }
  const WorkerHealth health = status.failed()     ? WorkerHealth::kFailed
                              : status.draining() ? WorkerHealth::kDraining
                                                  : WorkerHealth::kHealthy;
  if (health != health_) result.capacity_changed = true;
  health_ = health;
  if (status.has_capacity()) {
    const WorkerCapacity capacity = FromProto(status.capacity());
    if (!has_capacity_ || capacity != capacity_) result.capacity_changed = true;
    capacity_ = capacity;
    has_capacity_ = true;
    if (queue_full_) result.capacity_changed = true;
    queue_full_ = false;
    ++reports_received_;
    if (ReleaseCovered()) result.capacity_changed = true;
  }

  if (status.has_snapshot() && !ApplySnapshotPart(status.snapshot())) LoseSync(&result);
  for (const v1::KvEventBatch& batch : status.event_batches()) {
    if (sync_ == KvSyncState::kAwaitingSnapshot && resync_requested_) {
      ++result.batches_skipped;  // the rest of a stream we already gave up on
      continue;
    }
    if (!ApplyBatch(batch, &result)) {
      LoseSync(&result);
      ++result.batches_skipped;
    }
  }
  return result;
}

void WorkerBooks::MarkUnreachable() {
  health_ = refused_reason_.empty() ? WorkerHealth::kUnreachable : WorkerHealth::kRefused;
  ClearIndexes();
  sync_ = KvSyncState::kAwaitingSnapshot;
  resync_requested_ = false;  // the reconnection brings a snapshot by itself
}

void WorkerBooks::MarkRefused(std::string reason) {
  refused_reason_ = std::move(reason);
  MarkUnreachable();
}

void WorkerBooks::LoseSync(ApplyResult* result) {
  ClearIndexes();
  sync_ = KvSyncState::kAwaitingSnapshot;
  if (!resync_requested_) {
    resync_requested_ = true;
    result->resync_needed = true;
  }
}

bool WorkerBooks::ApplySnapshotPart(const v1::KvSnapshot& part) {
  if (part.part_index() == 0) {
    ClearIndexes();
    resync_requested_ = false;
    sync_ = KvSyncState::kReceivingSnapshot;
    snapshot_sequence_ = part.sequence();
    next_part_ = 0;
  } else if (sync_ != KvSyncState::kReceivingSnapshot || part.part_index() != next_part_ ||
             part.sequence() != snapshot_sequence_) {
    return false;
  }
  for (const v1::StoredBlock& block : part.blocks()) {
    IndexFor(block.tier()).Insert(slot_, FromProto(block.hash()));
  }
  ++next_part_;
  if (part.last_part()) {
    sync_ = KvSyncState::kInSync;
    last_sequence_ = snapshot_sequence_;
  }
  return true;
}

bool WorkerBooks::ApplyBatch(const v1::KvEventBatch& batch, ApplyResult* result) {
  if (sync_ != KvSyncState::kInSync || batch.sequence() != last_sequence_ + 1) return false;
  for (const v1::KvEvent& event : batch.events()) {
    switch (event.event_case()) {
      case v1::KvEvent::kStored:
        for (const v1::StoredBlock& block : event.stored().blocks()) {
          IndexFor(block.tier()).Insert(slot_, FromProto(block.hash()));
        }
        break;
      case v1::KvEvent::kRemoved:
        for (const v1::BlockHash& hash : event.removed().hashes()) {
          IndexFor(event.removed().tier()).Remove(slot_, FromProto(hash));
        }
        break;
      case v1::KvEvent::kAllCleared:
        ClearIndexes();
        break;
      case v1::KvEvent::EVENT_NOT_SET:
        break;
    }
  }
  last_sequence_ = batch.sequence();
  ++result->batches_applied;
  return true;
}

void WorkerBooks::Reserve(const std::string& request_id, int64_t blocks) {
  Reservation& reservation = reservations_[request_id];
  reserved_blocks_ += blocks - reservation.blocks;
  reservation = Reservation{.blocks = blocks, .started_at_report = -1};
}

bool WorkerBooks::MarkStarted(const std::string& request_id) {
  auto it = reservations_.find(request_id);
  if (it == reservations_.end()) return false;
  it->second.started_at_report = reports_received_;
  return true;
}

bool WorkerBooks::Release(const std::string& request_id) {
  auto it = reservations_.find(request_id);
  if (it == reservations_.end()) return false;
  reserved_blocks_ -= it->second.blocks;
  reservations_.erase(it);
  return true;
}

bool WorkerBooks::ReleaseCovered() {
  const int64_t released = absl::erase_if(reservations_, [&](const auto& entry) {
    const Reservation& reservation = entry.second;
    if (reservation.started_at_report < 0 ||
        reports_received_ < reservation.started_at_report + reports_to_cover_) {
      return false;
    }
    reserved_blocks_ -= reservation.blocks;
    return true;
  });
  return released > 0;
}

}  // namespace kvserve
