// StatusSubscription: the engine's capacity and prefix-cache events for one Worker.StreamStatus
// stream. The first update carries a KV snapshot (epoch, sequence number, every cached hash);
// later updates carry the event batches since, in sequence order with no gap, plus the capacity
// at the time. When a consumer falls more than kMaxPendingBatches batches behind, its pending
// batches are dropped and the next update carries a fresh snapshot instead (the router then
// replaces its view, as worker.proto says).
//
// The engine thread produces; one consumer thread Pop()s (coalescing: one Pop returns everything
// pending, merged). Close() (by the consumer, or by the engine at Shutdown/StopAccepting) ends
// it: Pop then returns kEnd once drained.
//
// Thread-safety: all methods are thread-safe.
#ifndef KVSERVE_ENGINE_STATUS_SUBSCRIPTION_H_
#define KVSERVE_ENGINE_STATUS_SUBSCRIPTION_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "engine/engine_stats.h"
#include "kvcache/kv_events.h"

namespace kvserve {

struct StatusUpdate {
  uint64_t epoch = 0;
  std::optional<KvSnapshot> snapshot;  // first update, and after a resync
  std::vector<KvEventBatch> batches;   // after the snapshot (if any), in order, no gaps
  EngineStats stats;                   // capacity and queues as of this update
  bool draining = false;
};

class StatusSubscription {
 public:
  static constexpr int kMaxPendingBatches = 1024;

  enum class PopResult { kUpdate, kTimeout, kEnd };

  StatusSubscription() = default;
  StatusSubscription(const StatusSubscription&) = delete;
  StatusSubscription& operator=(const StatusSubscription&) = delete;

  // Consumer side: waits up to `timeout` for something new, then hands all of it over, merged.
  PopResult Pop(absl::Duration timeout, StatusUpdate* out);
  // Ends the subscription (idempotent); the engine stops feeding it.
  void Close();
  bool closed() const;
  // Called after every Publish and Close, outside the lock (see RequestStream::SetNotifier).
  void SetNotifier(std::function<void()> notifier);

  // Producer side (engine thread). A snapshot replaces everything pending. Returns false when the
  // consumer fell too far behind: pending batches were dropped and the engine must publish a
  // snapshot next.
  bool Publish(std::optional<KvSnapshot> snapshot, const std::vector<KvEventBatch>& batches,
               const EngineStats& stats, bool draining);
  bool needs_snapshot() const;

 private:
  void Notify();

  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled on Publish and Close
  bool has_update_ ABSL_GUARDED_BY(mu_) = false;
  bool needs_snapshot_ ABSL_GUARDED_BY(mu_) = true;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  StatusUpdate pending_ ABSL_GUARDED_BY(mu_);
  std::function<void()> notifier_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_STATUS_SUBSCRIPTION_H_
