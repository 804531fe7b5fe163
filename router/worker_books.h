// WorkerBooks: what the router knows about one worker group, kept from its status stream.
//
// The books hold the worker's last reported Capacity (block size, total / free / evictable /
// used blocks, running / waiting requests), its health, the state of the KV event stream
// (epoch, last applied sequence number, snapshot progress) and the router's own outstanding
// reservations: blocks charged to the worker for requests this router sent there that the
// worker's reports do not show yet. The worker's cached block hashes live in the cluster-wide
// PrefixIndex under the worker's slot; Apply() keeps them in step with the stream:
//   - a snapshot's part 0 empties the worker's set, every part adds its blocks, the last part
//     makes the view complete (in sync at the snapshot's sequence number s);
//   - in sync, batch s+1, s+2, ... apply stored / removed / all-cleared events in order;
//   - a gap (a batch whose sequence is not last + 1), a part out of order, a batch in the middle
//     of a snapshot, or a new epoch voids the view: the set is emptied, the books wait for a
//     snapshot, and Apply's result says `resync_needed` once, so the service reopens the stream.
// A new epoch (the worker restarted) also drops every reservation: the requests it held are gone.
//
// The books also keep the worker's kv_transfer_format (ModelInfo, set by the connection before
// each status stream): whether and with whom it can move KV blocks (routing_policy.h).
//
// Reservations: Reserve() when a request is routed here; MarkStarted() when the worker
// acknowledged it (first output); the reservation is released once `reports_to_cover` reports
// with capacity arrived after MarkStarted (they include the request's blocks), or by Release()
// when the request ends, whichever is first.
//
// Thread-safety: not thread-safe; ClusterBooks guards every WorkerBooks with its mutex.

#ifndef KVSERVE_ROUTER_WORKER_BOOKS_H_
#define KVSERVE_ROUTER_WORKER_BOOKS_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvserve/v1/worker.pb.h"
#include "router/prefix_index.h"

namespace kvserve {

// kFailed: the worker's StreamStatus says its engine failed (worker.proto WorkerStatus.failed).
// kRefused: the worker's serving fingerprint differs from the router's (MarkRefused).
enum class WorkerHealth { kHealthy, kDraining, kFailed, kUnreachable, kRefused };
std::string_view WorkerHealthName(WorkerHealth health);

enum class KvSyncState {
  kAwaitingSnapshot,   // the set is empty or void; waiting for a snapshot's part 0
  kReceivingSnapshot,  // parts 0..k applied, more to come
  kInSync,             // the set equals the worker's prefix cache as of last_sequence()
};

// What one Apply() changed, for the service to act on.
struct ApplyResult {
  // The view became void just now: reopen Worker.StreamStatus for a fresh snapshot. Reported
  // once per loss of sync (later messages of the old stream are ignored without asking again).
  bool resync_needed = false;
  // Capacity, health or reservations changed: a waiting request may fit now.
  bool capacity_changed = false;
  // Event batches applied / skipped (skipped: arrived while no view was in sync).
  int batches_applied = 0;
  int batches_skipped = 0;
};

// The last reported capacity; all zero before the first report.
struct WorkerCapacity {
  int32_t block_size = 0;
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;  // includes evictable
  int64_t evictable_blocks = 0;
  int64_t used_blocks = 0;
  int32_t running_requests = 0;
  int32_t waiting_requests = 0;
  int32_t max_waiting_requests = 0;  // 0: not reported
  int64_t host_blocks = 0;           // the host KV tier's size (0: none)
  int64_t host_cached_blocks = 0;    // of those, holding a cached block

  friend bool operator==(const WorkerCapacity&, const WorkerCapacity&) = default;
};

class WorkerBooks {
 public:
  // `slot` names this worker in `index` (the blocks in its KV pool) and `host_index` (those in
  // its host tier); both owned by the caller, outliving the books.
  // REQUIRES: 0 <= slot < WorkerMask::kMaxWorkers, block_size > 0, reports_to_cover >= 1.
  WorkerBooks(std::string worker_id, int slot, int block_size, int reports_to_cover,
              PrefixIndex* index, PrefixIndex* host_index);
  WorkerBooks(const WorkerBooks&) = delete;
  WorkerBooks& operator=(const WorkerBooks&) = delete;

  // Applies one status message. INVALID_ARGUMENT (nothing applied) for epoch 0;
  // FAILED_PRECONDITION (nothing applied) for a block size other than the router's.
  absl::StatusOr<ApplyResult> Apply(const kvserve::v1::WorkerStatus& status);

  // The status stream broke or the worker cannot be reached: not routable, view void until the
  // next snapshot. Reservations stay (their requests end or migrate and Release them).
  void MarkUnreachable();
  // The worker tokenizes, renders or hashes differently from the router (its ServingFingerprint
  // differs; `reason` says how): not routable, view void, health kRefused (through later
  // MarkUnreachable calls too) until called again with an empty reason, which makes it
  // unreachable until its next report.
  void MarkRefused(std::string reason);

  // The worker's ModelInfo.kv_transfer_format (empty: it neither sends nor receives blocks).
  void SetKvTransferFormat(std::string format) { kv_transfer_format_ = std::move(format); }

  // The worker refused a request because its waiting queue was full (RESOURCE_EXHAUSTED before
  // it ran): until its next capacity report its queue counts as full (waiting_requests()), so
  // requests wait in the router's queue instead of going back to it. The router's view lags the
  // worker's (a preempted request re-enters the worker's queue between reports).
  void MarkQueueFull() { queue_full_ = true; }
  // The worker's waiting requests as routing sees them: its last report's, or its whole limit
  // after MarkQueueFull until the next report.
  int32_t waiting_requests() const {
    return queue_full_ ? std::max(capacity_.waiting_requests, capacity_.max_waiting_requests)
                       : capacity_.waiting_requests;
  }

  // Charges `blocks` to this worker for `request_id` (replacing an earlier charge for it).
  void Reserve(const std::string& request_id, int64_t blocks);
  // Starts the covering countdown of the request's reservation. False when there is none.
  bool MarkStarted(const std::string& request_id);
  // Drops the request's reservation. False when there was none (already covered or released).
  bool Release(const std::string& request_id);

  const std::string& worker_id() const { return worker_id_; }
  // The id the worker reports for itself (WorkerIdentity.worker_id); empty until it did.
  const std::string& reported_id() const { return reported_id_; }
  int slot() const { return slot_; }
  WorkerHealth health() const { return health_; }
  const std::string& refused_reason() const { return refused_reason_; }
  // When the last status message was applied; InfinitePast before the first.
  absl::Time last_report() const { return last_report_; }
  // Routable: healthy and its capacity known.
  bool routable() const { return health_ == WorkerHealth::kHealthy && has_capacity_; }
  const std::string& kv_transfer_format() const { return kv_transfer_format_; }
  // Can serve Worker.FetchKvBlocks: it has a transfer format and its stream is up, healthy or
  // draining (a draining worker still holds its cache; not failed, unreachable or refused).
  bool can_send_blocks() const {
    return !kv_transfer_format_.empty() &&
           (health_ == WorkerHealth::kHealthy || health_ == WorkerHealth::kDraining);
  }
  bool has_capacity() const { return has_capacity_; }
  const WorkerCapacity& capacity() const { return capacity_; }
  KvSyncState sync_state() const { return sync_; }
  uint64_t epoch() const { return epoch_; }
  uint64_t last_sequence() const { return last_sequence_; }
  int64_t reserved_blocks() const { return reserved_blocks_; }
  int outstanding_requests() const { return static_cast<int>(reservations_.size()); }
  // Hashes the router believes the worker holds in its pool, and in its host tier (0 while the
  // view is void).
  int64_t cached_blocks() const { return index_->CountFor(slot_); }
  int64_t host_cached_blocks() const { return host_index_->CountFor(slot_); }

 private:
  struct Reservation {
    int64_t blocks = 0;
    int64_t started_at_report = -1;  // reports_received_ at MarkStarted; -1: not started
  };

  void LoseSync(ApplyResult* result);
  // Returns false on a protocol violation (the caller loses sync).
  bool ApplySnapshotPart(const kvserve::v1::KvSnapshot& part);
  bool ApplyBatch(const kvserve::v1::KvEventBatch& batch, ApplyResult* result);
  bool ReleaseCovered();

  const std::string worker_id_;
  std::string reported_id_;
  const int slot_;
  const int block_size_;
  const int reports_to_cover_;
  // Forgets every hash of this worker, in both tiers.
  void ClearIndexes();
  PrefixIndex& IndexFor(kvserve::v1::KvTier tier);

  PrefixIndex* const index_;       // not owned
  PrefixIndex* const host_index_;  // not owned

  WorkerHealth health_ = WorkerHealth::kUnreachable;  // until the first report
  std::string refused_reason_;                        // non-empty: health_ is kRefused
  std::string kv_transfer_format_;                    // empty: no KV block transfer
  absl::Time last_report_ = absl::InfinitePast();
  bool has_capacity_ = false;
  WorkerCapacity capacity_;
  int64_t reports_received_ = 0;  // messages with capacity, this epoch

  uint64_t epoch_ = 0;  // 0: none seen yet
  KvSyncState sync_ = KvSyncState::kAwaitingSnapshot;
  bool resync_requested_ = false;   // LoseSync reported; cleared by the next part 0
  uint64_t last_sequence_ = 0;      // in sync: last applied batch (or the snapshot's)
  uint64_t snapshot_sequence_ = 0;  // receiving: the snapshot's sequence number
  int32_t next_part_ = 0;           // receiving: the part expected next

  absl::flat_hash_map<std::string, Reservation> reservations_;
  int64_t reserved_blocks_ = 0;  // sum over reservations_
  bool queue_full_ = false;      // MarkQueueFull until the next capacity report
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_WORKER_BOOKS_H_
