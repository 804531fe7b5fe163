// TaskThread: one thread of its own that runs posted tasks in the order they were posted, beside
// the caller; Join() returns once every task posted before it has run. The thread starts with the
// first task (an owner that never posts never has one) and sleeps while there is nothing to run.
// The CPU backend copies host-tier blocks on one while a step computes (CopyFromHostBeside); the
// Llama runner fills a step's structured-output masks on one while the forward runs.
//
// Thread-safety: Post and Join are called by one thread at a time (the owner); the tasks run on
// the TaskThread's own thread.
#ifndef KVSERVE_BASE_TASK_THREAD_H_
#define KVSERVE_BASE_TASK_THREAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace kvserve {

class TaskThread {
 public:
  TaskThread() = default;
  ~TaskThread() {  // runs what was posted first
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
      ++num_posted_;
      if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
    }
    cv_.notify_all();
  }

  // Returns at once when nothing is pending.
  void Join() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t target = num_posted_;
    cv_.wait(lock, [&] { return num_done_ >= target; });
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_, nothing left
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      ++num_done_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;  // a task was posted or has run, or stop_
  std::deque<std::function<void()>> tasks_;
  int64_t num_posted_ = 0;
  int64_t num_done_ = 0;  // of those, run
  bool stop_ = false;
  std::thread thread_;  // started by the first Post
};

}  // namespace kvserve

#endif  // KVSERVE_BASE_TASK_THREAD_H_
