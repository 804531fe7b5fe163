// WaitWithTimeout: waits on a std::condition_variable for a predicate with an absl::Duration
// timeout (absl::InfiniteDuration() blocks, absl::ZeroDuration() only checks). The engine's
// queues use std::mutex / std::condition_variable rather than absl::Mutex so that
// ThreadSanitizer understands them (the system's absl is not built with TSAN annotations).
#ifndef KVSERVE_ENGINE_CONDITION_WAIT_H_
#define KVSERVE_ENGINE_CONDITION_WAIT_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace kvserve {

// REQUIRES: `lock` holds the mutex the predicate's state is guarded by. Returns pred().
template <typename Predicate>
bool WaitWithTimeout(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                     absl::Duration timeout, Predicate pred) {
  if (timeout >= absl::Hours(24 * 365)) {  // infinite, or long enough to be
    cv.wait(lock, pred);
    return true;
  }
  if (timeout <= absl::ZeroDuration()) return pred();
  return cv.wait_for(lock, absl::ToChronoNanoseconds(timeout), pred);
}

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_CONDITION_WAIT_H_
