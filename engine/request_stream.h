// RequestStream: the output channel of one request, from the engine thread (producer) to the
// thread that serves the request, e.g. a gRPC reactor (consumer).
//
// The engine Push()es EngineOutput messages in order and ends the stream once with Close():
// OK after the message carrying usage; CANCELLED after Abort; UNAVAILABLE when the engine
// shuts down or fails before the request finished (the router then migrates it); any other
// error as it happened. The consumer calls Pop() (blocking with a timeout, or zero to poll) until
// it returns kEnd, then reads final_status(). An optional notifier (SetNotifier) is called after
// every Push and after Close, for consumers that prefer to be woken (gRPC callback reactors);
// it runs on the engine thread, outside the stream's lock, and must be cheap and not block.
//
// Thread-safety: all methods are thread-safe.
#ifndef KVSERVE_ENGINE_REQUEST_STREAM_H_
#define KVSERVE_ENGINE_REQUEST_STREAM_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/engine_output.h"

namespace kvserve {

class RequestStream {
 public:
  enum class PopResult {
    kOutput,   // *out holds the next message
    kTimeout,  // nothing arrived within the timeout; the stream is still open
    kEnd,      // closed and every message consumed; see final_status()
  };

  explicit RequestStream(std::string request_id) : request_id_(std::move(request_id)) {}

  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  const std::string& request_id() const { return request_id_; }

  // Producer side (the engine). Push after Close is ignored; Close is idempotent (first wins).
  void Push(EngineOutput output);
  void Close(absl::Status status);

  // Consumer side. Waits up to `timeout` (absl::InfiniteDuration() to block, ZeroDuration() to
  // poll) for the next message.
  PopResult Pop(absl::Duration timeout, EngineOutput* out);

  // Called after every Push and Close (see above). Set it before the first Pop; replaces any
  // previous notifier. If the stream already holds messages or is closed, it is called once at
  // once, on the calling thread.
  void SetNotifier(std::function<void()> notifier);

  bool closed() const;
  // The status passed to Close; OK while open.
  absl::Status final_status() const;

 private:
  void Notify();

  const std::string request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // signalled on Push and Close
  std::deque<EngineOutput> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::function<void()> notifier_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_REQUEST_STREAM_H_
