// CopyThread: the CPU backend's side of Backend::CopyFromHostBeside. Copies queued here run on a
// thread of their own, in the order they were queued, while the caller goes on with a step's
// compute; Join() returns once every copy queued before it is done. The thread starts with the
// first copy (a worker without a host KV tier never has one) and sleeps while the queue is empty.
//
// On a machine with as many busy compute threads as cores the copy time-shares a core with them;
// what it buys there is that no step waits for a copy it does not read (the scheduler defers the
// sequence whose blocks are loading), not free bandwidth.
//
// Thread-safety: Queue and Join are called by one thread at a time (the backend's caller).
#ifndef KVSERVE_KERNELS_CPU_COPY_THREAD_H_
#define KVSERVE_KERNELS_CPU_COPY_THREAD_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>

#include "kernels/kernels.h"

namespace kvserve::kernels::cpu {

class CopyThread {
 public:
  CopyThread() = default;
  ~CopyThread();  // finishes the queued copies
  CopyThread(const CopyThread&) = delete;
  CopyThread& operator=(const CopyThread&) = delete;

  // REQUIRES: the regions' memory stays valid, and nothing else touches it, until Join.
  void Queue(const Backend::CopyRegion* regions, int count);
  void Join();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable queued_cv_;  // Loop waits for copies (or stop_)
  std::condition_variable done_cv_;    // Join waits for the queue to drain
  std::deque<Backend::CopyRegion> queue_;
  int64_t num_queued_ = 0;  // copies queued so far
  int64_t num_done_ = 0;    // of those, finished
  bool stop_ = false;
  std::thread thread_;  // started by the first Queue
};

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_COPY_THREAD_H_
