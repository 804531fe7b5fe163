#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels::cpu {
namespace {

// Iterations of a waiting spin before a thread sleeps on its condition variable: about 50-100 us
// (a pause is 40-140 cycles). A decode step runs hundreds of loops back to back, and a futex
// wake-up per loop costs more than the loop itself on a small machine; past the bound a thread
// sleeps, so a pool that waits between steps (or a busy machine) gives its cores back.
constexpr int kSpinIterations = 2000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

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
    stop_.store(true, std::memory_order_release);
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
  invoke_ = invoke;
  body_ = body;
  num_items_ = num_items;
  next_item_.store(0, std::memory_order_relaxed);
  busy_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  bool wake = false;
  {
    // Under mu_, so that a worker checking generation_ before it sleeps cannot miss the bump.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleeping_workers_ > 0;
  }
  if (wake) work_ready_.notify_all();
  Drain(0);
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (busy_workers_.load(std::memory_order_acquire) == 0) return;
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  work_done_.wait(lock, [this] { return busy_workers_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint64_t seen_generation = 0;
  for (;;) {
    bool ready = false;
    for (int spin = 0; spin < kSpinIterations && !ready; ++spin) {
      ready = generation_.load(std::memory_order_acquire) != seen_generation ||
              stop_.load(std::memory_order_acquire);
      if (!ready) CpuRelax();
    }
    if (!ready) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_workers_;
      work_ready_.wait(lock, [&] {
        return stop_.load(std::memory_order_relaxed) ||
               generation_.load(std::memory_order_relaxed) != seen_generation;
      });
      --sleeping_workers_;
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen_generation = generation_.load(std::memory_order_acquire);
    Drain(thread_index);
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // The caller may be asleep on work_done_: under mu_, so the wake-up cannot be missed.
      std::lock_guard<std::mutex> lock(mu_);
      work_done_.notify_one();
    }
  }
}

}  // namespace kvserve::kernels::cpu
