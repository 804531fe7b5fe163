#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels::cpu {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (num_threads <= 0) num_threads = 1;
  workers_.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Drain(int thread_index) {
  for (;;) {
    const int64_t item = next_item_.fetch_add(1, std::memory_order_relaxed);
    if (item >= num_items_) return;
    invoke_(body_, item, thread_index);
  }
}

void ThreadPool::Run(int64_t num_items, Invoke invoke, const void* body) {
  if (num_items <= 0) return;
  if (workers_.empty() || num_items == 1) {
    for (int64_t i = 0; i < num_items; ++i) invoke(body, i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    invoke_ = invoke;
    body_ = body;
    num_items_ = num_items;
    next_item_.store(0, std::memory_order_relaxed);
    busy_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  Drain(0);
  std::unique_lock<std::mutex> lock(mu_);
  work_done_.wait(lock, [this] { return busy_workers_ == 0; });
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint64_t seen_generation = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_ready_.wait(lock, [&] { return stop_ || generation_ != seen_generation; });
      if (stop_) return;
      seen_generation = generation_;
    }
    Drain(thread_index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_workers_ == 0) work_done_.notify_one();
    }
  }
}

}  // namespace kvserve::kernels::cpu
