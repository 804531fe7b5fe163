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

void ThreadPool::Drain(uint32_t generation, int thread_index) {
  uint64_t word = loop_.load(std::memory_order_acquire);
  for (;;) {
    if (GenerationOf(word) != generation) return;
    const uint64_t count = (word >> kItemBits) & kItemMask;
    const uint64_t next = word & kItemMask;
    if (next >= count) return;
    // On failure `word` is reloaded and checked again.
    if (!loop_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      continue;
    }
    // Item `next` is ours: the loop cannot end (and its body change) before it is done.
    invoke_(body_, item_offset_ + static_cast<int64_t>(next), thread_index);
    if (items_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<int64_t>(count)) {
      // The caller may be asleep on work_done_: under mu_, so the wake-up cannot be missed.
      std::lock_guard<std::mutex> lock(mu_);
      if (caller_sleeping_) work_done_.notify_one();
    }
    word = loop_.load(std::memory_order_acquire);
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
  for (int64_t offset = 0; offset < num_items; offset += kMaxItemsPerLoop - 1) {
    item_offset_ = offset;
    RunLoop(num_items - offset < kMaxItemsPerLoop - 1 ? num_items - offset : kMaxItemsPerLoop - 1);
  }
}

void ThreadPool::RunLoop(int64_t count) {
  items_done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = GenerationOf(loop_.load(std::memory_order_relaxed)) + 1;  // wraps
  bool wake = false;
  {
    // Under mu_, so that a worker checking the generation before it sleeps cannot miss it.
    std::lock_guard<std::mutex> lock(mu_);
    loop_.store((uint64_t{generation} << 32) | (static_cast<uint64_t>(count) << kItemBits),
                std::memory_order_release);
    wake = sleeping_workers_ > 0;
  }
  if (wake) work_ready_.notify_all();
  Drain(generation, 0);
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (items_done_.load(std::memory_order_acquire) == count) return;
    CpuRelax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  caller_sleeping_ = true;
  work_done_.wait(lock, [&] { return items_done_.load(std::memory_order_acquire) == count; });
  caller_sleeping_ = false;
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint32_t seen = 0;  // the generation this worker last drained
  const auto current = [this] { return GenerationOf(loop_.load(std::memory_order_acquire)); };
  for (;;) {
    bool ready = false;
    for (int spin = 0; spin < kSpinIterations && !ready; ++spin) {
      ready = current() != seen || stop_.load(std::memory_order_acquire);
      if (!ready) CpuRelax();
    }
    if (!ready) {
      std::unique_lock<std::mutex> lock(mu_);
      ++sleeping_workers_;
      work_ready_.wait(lock,
                       [&] { return stop_.load(std::memory_order_relaxed) || current() != seen; });
      --sleeping_workers_;
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = current();
    Drain(seen, thread_index);
  }
}

}  // namespace kvserve::kernels::cpu
