// ThreadPool: a fixed set of worker threads, started once, that run ParallelFor loops. The
// calling thread takes part in every loop, so a pool of n threads starts n - 1 workers and a
// pool of 1 runs everything inline. Items are handed out one at a time from an atomic counter,
// so uneven items (a long prefill chunk next to short decodes) balance themselves.
//
// Steady state creates no threads and allocates nothing: the loop body is passed by reference
// through a type-erased pointer, never copied into a std::function. Waiting is bounded spinning,
// then sleeping: workers spin for the next loop and the caller for the loop's end for about
// 50-100 us (a decode step runs hundreds of loops back to back), then sleep on a condition
// variable, so an idle pool or a busy machine gets its cores back. A loop ends when its items
// are done, whichever threads did them: on a machine with more runnable threads than cores, a
// worker the OS has descheduled delays a loop by at most the item it holds, and one that has
// not started delays it not at all (the caller and the others take its share).
// Thread-safety: ParallelFor may be called from one thread at a time (the engine thread); calls
// do not nest.
#ifndef KVSERVE_KERNELS_CPU_THREAD_POOL_H_
#define KVSERVE_KERNELS_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve::kernels::cpu {

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads taking part in a loop, the caller included.
  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs body(item, thread_index) for every item in [0, num_items), thread_index in
  // [0, num_threads()) naming the thread (for per-thread scratch). Returns when all are done.
  template <typename Body>
  void ParallelFor(int64_t num_items, const Body& body) {
    Run(num_items, &Trampoline<Body>, &body);
  }

 private:
  using Invoke = void (*)(const void* body, int64_t item, int thread_index);

  template <typename Body>
  static void Trampoline(const void* body, int64_t item, int thread_index) {
    (*static_cast<const Body*>(body))(item, thread_index);
  }

  // The loop in flight is one word: generation (32 bits), item count (16 bits) and the next
  // unclaimed item (16 bits). A thread claims an item with a compare-and-swap that also checks
  // the generation, so a worker that wakes late (descheduled while the loop ran) can never claim
  // an item of a loop that has moved on, and the loop's end is counted in items done, not in
  // workers checked in: the caller waits only for items in flight, never for a worker that has
  // not started.
  static constexpr int kItemBits = 16;
  static constexpr uint64_t kItemMask = (uint64_t{1} << kItemBits) - 1;
  static constexpr int64_t kMaxItemsPerLoop = int64_t{1} << kItemBits;
  static_assert(2 * kItemBits == 32, "the generation is the word's upper 32 bits");
  static uint32_t GenerationOf(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

  void Run(int64_t num_items, Invoke invoke, const void* body);
  void RunLoop(int64_t num_items);  // REQUIRES: 1 <= num_items < kMaxItemsPerLoop
  void WorkerLoop(int thread_index);
  // Claims and runs items of the loop whose word had generation `generation`; returns when none
  // is left (or the loop is no longer that generation).
  void Drain(uint32_t generation, int thread_index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_ready_;  // sleeping workers wait for a new generation or stop_
  std::condition_variable work_done_;   // a sleeping caller waits for items_done_ == the count
  std::atomic<uint64_t> loop_{0};       // generation | count | next item, see above
  std::atomic<int64_t> items_done_{0};  // of the loop in flight
  std::atomic<bool> stop_{false};       // set under mu_
  int sleeping_workers_ = 0;            // guarded by mu_
  bool caller_sleeping_ = false;        // guarded by mu_
  // The loop in flight's body and the offset of its first item (a loop over more than
  // kMaxItemsPerLoop items runs as several); written by the caller before the new generation is
  // published (release), read by a thread only after its claim succeeded.
  Invoke invoke_ = nullptr;
  const void* body_ = nullptr;
  int64_t item_offset_ = 0;
};

// Runs body(begin, end) over [0, n) cut into ranges of `chunk` (the last may be shorter), on
// pool when there are at least two ranges (nullptr: all on the calling thread, as one range).
template <typename Body>
void ParallelForRanges(ThreadPool* pool, int64_t n, int64_t chunk, const Body& body) {
  const int64_t num_items = (n + chunk - 1) / chunk;
  if (pool == nullptr || num_items < 2) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  pool->ParallelFor(num_items, [&](int64_t item, int /*thread_index*/) {
    const int64_t begin = item * chunk;
    body(begin, begin + chunk < n ? begin + chunk : n);
  });
}

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_THREAD_POOL_H_
