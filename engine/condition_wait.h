// WaitWithTimeout: waits on a std::condition_variable for a predicate with an absl::Duration
// timeout (absl::InfiniteDuration() blocks, absl::ZeroDuration() only checks). Its callers are
// the engine's hand-offs (RequestStream, StatusSubscription, Engine's inbox), which lock a
// std::mutex and wait on std::condition_variables, where worker/ and router/ use absl::Mutex:
// ThreadSanitizer (KVSERVE_SANITIZE=thread) sees a std::mutex through its pthread interceptors,
// but not the system's absl::Mutex, which is built without TSAN annotations. The ABSL_GUARDED_BY
// annotations on those std::mutex members name the guarding mutex for the reader; no compiler
// checks them (libstdc++'s std::mutex is not an annotated capability).
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
