#include "kernels/cpu/copy_thread.h"

#include <cstring>

namespace kvserve::kernels::cpu {

CopyThread::~CopyThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queued_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void CopyThread::Queue(const Backend::CopyRegion* regions, int count) {
  if (count <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.insert(queue_.end(), regions, regions + count);
    num_queued_ += count;
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  queued_cv_.notify_one();
}

void CopyThread::Join() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t target = num_queued_;
  done_cv_.wait(lock, [&] { return num_done_ >= target; });
}

void CopyThread::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    queued_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_, nothing left
    const Backend::CopyRegion region = queue_.front();
    queue_.pop_front();
    lock.unlock();
    std::memcpy(region.dst, region.src, region.bytes);
    lock.lock();
    ++num_done_;
    if (queue_.empty()) done_cv_.notify_all();
  }
}

}  // namespace kvserve::kernels::cpu
