#include "runner/background_task.h"

#include <utility>

namespace kvserve {

BackgroundTask::~BackgroundTask() {
  Wait();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BackgroundTask::Start(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    task_ = std::move(task);
    running_ = true;
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  cv_.notify_all();
}

void BackgroundTask::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !running_; });
}

void BackgroundTask::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || task_ != nullptr; });
    if (task_ == nullptr) return;  // stop_
    std::function<void()> task = std::move(task_);
    task_ = nullptr;
    lock.unlock();
    task();
    lock.lock();
    running_ = false;
    cv_.notify_all();
  }
}

}  // namespace kvserve
