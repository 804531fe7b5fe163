#include "engine/request_stream.h"

#include <utility>

#include "engine/condition_wait.h"

namespace kvserve {

void RequestStream::Push(EngineOutput output) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    queue_.push_back(std::move(output));
  }
  cv_.notify_all();
  Notify();
}

void RequestStream::Close(absl::Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    status_ = std::move(status);
  }
  cv_.notify_all();
  Notify();
}

RequestStream::PopResult RequestStream::Pop(absl::Duration timeout, EngineOutput* out) {
  std::unique_lock<std::mutex> lock(mu_);
  WaitWithTimeout(cv_, lock, timeout, [this] { return !queue_.empty() || closed_; });
  if (!queue_.empty()) {
    *out = std::move(queue_.front());
    queue_.pop_front();
    return PopResult::kOutput;
  }
  return closed_ ? PopResult::kEnd : PopResult::kTimeout;
}

void RequestStream::SetNotifier(std::function<void()> notifier) {
  bool call_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notifier_ = std::move(notifier);
    call_now = notifier_ && (!queue_.empty() || closed_);
  }
  if (call_now) Notify();
}

bool RequestStream::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

absl::Status RequestStream::final_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void RequestStream::Notify() {
  std::function<void()> notifier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notifier = notifier_;
  }
  if (notifier) notifier();
}

}  // namespace kvserve
