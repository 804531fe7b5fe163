#include "engine/status_subscription.h"

#include <utility>

#include "engine/condition_wait.h"

namespace kvserve {

StatusSubscription::PopResult StatusSubscription::Pop(absl::Duration timeout, StatusUpdate* out) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitWithTimeout(cv_, lock, timeout, [this] { return has_update_ || closed_; });
  if (has_update_) {
    *out = std::move(pending_);
    pending_ = StatusUpdate();
    has_update_ = false;
    return PopResult::kUpdate;
  }
  return closed_ ? PopResult::kEnd : PopResult::kTimeout;
}

void StatusSubscription::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
  }
  cv_.notify_all();
  Notify();
}

bool StatusSubscription::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void StatusSubscription::SetNotifier(std::function<void()> notifier) {
  bool call_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notifier_ = std::move(notifier);
    call_now = notifier_ && (has_update_ || closed_);
  }
  if (call_now) Notify();
}

bool StatusSubscription::Publish(std::optional<KvSnapshot> snapshot,
                                 const std::vector<KvEventBatch>& batches, const EngineStats& stats,
                                 bool draining) {
  bool ok = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return true;
    if (snapshot.has_value()) {
      // A snapshot supersedes whatever the consumer has not read yet.
      pending_.snapshot = std::move(snapshot);
      pending_.batches.clear();
      needs_snapshot_ = false;
    } else if (needs_snapshot_) {
      return false;  // batches are useless before the snapshot they follow
    }
    for (const KvEventBatch& batch : batches) {
      if (batch.events.empty()) continue;
      if (pending_.snapshot.has_value() &&
          batch.sequence_number <= pending_.snapshot->sequence_number) {
        continue;  // already in the snapshot
      }
      pending_.batches.push_back(batch);
    }
    if (static_cast<int>(pending_.batches.size()) > kMaxPendingBatches) {
      pending_.batches.clear();
      pending_.snapshot.reset();
      needs_snapshot_ = true;
      ok = false;
    }
    pending_.epoch = stats.epoch;
    pending_.stats = stats;
    pending_.draining = draining;
    has_update_ = ok;
  }
  if (ok) {
    cv_.notify_all();
    Notify();
  }
  return ok;
}

bool StatusSubscription::needs_snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return needs_snapshot_;
}

void StatusSubscription::Notify() {
  std::function<void()> notifier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notifier = notifier_;
  }
  if (notifier) notifier();
}

}  // namespace kvserve
