// WorkerConnection: the router's link to one worker group leader: a gRPC channel (shared by the
// status stream and every request proxied there) and a thread that keeps the worker's books
// current from its Worker.StreamStatus stream.
//
// The thread loops: fetch the worker's ModelInfo (GetModelInfo), note its kv_transfer_format in
// the books and compare its serving fingerprint with the router's (a worker that differs is
// refused: not routable, health "refused" with the reason, asked again after a backoff), open
// StreamStatus, apply every message to ClusterBooks. When the books say the view lost sync (a
// sequence gap or a new epoch) it cancels the stream and reopens it at once for a fresh
// snapshot. When the stream breaks (the worker died, restarted, drained or the network failed)
// the worker is marked unreachable (not routable, its hashes dropped) and the thread reconnects
// with exponential backoff. Requests running on the worker notice the break on their own
// streams and migrate (generate_proxy.h).
//
// A worker that stops answering without closing its connections is detected three ways:
//   - HTTP/2 keepalive on the channel: a ping every `keepalive_time`, the transport closed when
//     no answer comes within `keepalive_timeout`; every call on it then fails with UNAVAILABLE
//     and the worker is marked unreachable. A frozen process (SIGSTOP, a hung host) is caught
//     this way within about keepalive_time + keepalive_timeout (2 s; bound 5 s). The worker's
//     server permits pings this often (worker/worker_server.cc);
//   - a liveness deadline on the status stream: the worker publishes its status between engine
//     steps and at least every 500 ms when idle, so a stream silent for `liveness_timeout`
//     (default 10 s) means an engine that is hung or starved behind a live transport. The worker
//     is taken out of rotation (no new requests) and the stream reopened; it is routable again
//     at its next snapshot. Its requests are not cancelled for this: an overloaded worker is
//     slow, not lost, and failing its streams over would move the overload, not relieve it;
//   - request streams registered with RegisterCall: each one that makes no progress for
//     `stream_progress_timeout` is cancelled (UnregisterCall then says so, and the proxy
//     migrates it): this is what moves the requests of a hung engine. The clock runs only while
//     a read is pending, so a client slow to take its messages never moves a healthy worker's
//     request. Progress is any message: output, or a progress report, which the worker sends
//     after an engine step while the request has no output (prefilling in chunks, or queued) at
//     most every progress_interval_ms(); so a long prompt on a slow worker is not a stall, but an
//     engine stuck in one step is.
//
// Log lines (base/log.h), each naming the worker: worker_connected (its first status stream),
// worker_lost (a stream that had delivered broke), worker_unreachable (the first failed attempt
// to reach a worker not already reported down, then again every kDownLogInterval while it stays
// down; each attempt is a DEBUG worker_connect_failed), worker_unresponsive (the liveness
// deadline passed; again every kDownLogInterval while it stays silent), worker_reconnected (status
// flows again after any of those, with how long it was down), worker_refused / worker_accepted
// (the fingerprint canary's verdict, when it changes), worker_status_rejected.
//
// Thread-safety: thread-safe. Stop() (or the destructor) cancels the stream and joins the
// thread; the books must outlive the connection.
#ifndef KVSERVE_ROUTER_WORKER_CONNECTION_H_
#define KVSERVE_ROUTER_WORKER_CONNECTION_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvserve/v1/worker.grpc.pb.h"
#include "router/cluster_books.h"

namespace kvserve {

struct WorkerConnectionOptions {
  std::string router_id;           // StatusRequest.router_id
  int32_t status_interval_ms = 0;  // StatusRequest.min_interval_ms (0: the worker's default)
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // Frozen-worker detection (see above).
  absl::Duration keepalive_time = absl::Seconds(1);
  absl::Duration keepalive_timeout = absl::Seconds(1);
  absl::Duration liveness_timeout = absl::Seconds(10);
  absl::Duration stream_progress_timeout = absl::Seconds(30);
  // The router's own serving fingerprint: a worker whose ModelInfo fingerprint differs
  // (api/serving_fingerprint.h) is refused (ClusterBooks::MarkRefused, logged once per reason)
  // and asked again after a backoff. Unset: workers are not checked.
  std::optional<kvserve::v1::ServingFingerprint> fingerprint;
  // Called after every change applied to the books (metrics refresh); may be empty.
  std::function<void()> on_books_changed;
};

class WorkerConnection {
 public:
  // While a worker stays down, how often its state is logged again.
  static constexpr absl::Duration kDownLogInterval = absl::Minutes(5);

  // `address` ("host:port") is also the worker's id in the books, where it must be registered.
  WorkerConnection(std::string address, std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ClusterBooks* books, WorkerConnectionOptions options);
  ~WorkerConnection();
  WorkerConnection(const WorkerConnection&) = delete;
  WorkerConnection& operator=(const WorkerConnection&) = delete;

  // Starts the status thread. REQUIRES: called once.
  void Start();
  // Cancels the stream and joins the thread. Idempotent.
  void Stop();

  const std::string& address() const { return address_; }
  kvserve::v1::Worker::Stub& stub() { return *stub_; }
  // The worker's last ModelInfo; nullopt until GetModelInfo first succeeded.
  std::optional<kvserve::v1::ModelInfo> model_info() const;

  // A request stream on this worker (see above). `context` must stay valid until UnregisterCall.
  uint64_t RegisterCall(grpc::ClientContext* context);
  // The stream received a message (output, or a progress report): it made progress. Until the
  // next NoteReadStarted the stream is not expected to deliver (the client is still taking that
  // message), so its stall clock stops.
  void NoteProgress(uint64_t call);
  // A read of the stream's next message started: its stall clock starts from now.
  void NoteReadStarted(uint64_t call);
  // The progress report interval to ask of the worker for each request stream
  // (WorkerGenerateRequest.progress_interval_ms): a quarter of stream_progress_timeout, so that
  // a request that is prefilling or queued behind a live engine reports several times within
  // the timeout, as long as one engine step takes well under it.
  int32_t progress_interval_ms() const;
  // True when the connection cancelled the call because the worker stopped answering or the
  // stream made no progress: a worker failure, not the client's cancel.
  bool UnregisterCall(uint64_t call);

 private:
  struct TrackedCall {
    grpc::ClientContext* context = nullptr;
    absl::Time last_progress;  // the last message, or the start of the read now pending
    bool reading = true;       // a read is pending (from registration: the first one follows)
    bool cancelled_as_lost = false;
  };

  // The watchdog thread: the liveness deadline and the per-stream progress deadline.
  void Watch();
  void Run();
  // One stream, to its end. Returns true when it ended because the books asked for a resync.
  bool StreamOnce();
  // Fetches the worker's ModelInfo and checks its fingerprint. False when it failed or the
  // worker is refused.
  bool FetchModelInfo();
  // Sleeps up to `duration`; false when Stop() was called.
  bool SleepUnlessStopped(absl::Duration duration);
  void Changed() const;

  // The state the log last reported; used by the status thread (Run) only.
  enum class LinkState { kNew, kUp, kDown, kUnresponsive };
  // Status flows: worker_connected or worker_reconnected.
  void NoteConnected();
  // A status stream that had delivered ended with `status` (not for a resync): worker_lost.
  void NoteLost(const grpc::Status& status);
  // A status stream was cancelled for silence: worker_unresponsive (rate-limited).
  void NoteUnresponsive();
  // An attempt to reach the worker failed with `status`: worker_unreachable (rate-limited).
  void NoteUnreachable(const grpc::Status& status);

  const std::string address_;
  ClusterBooks* const books_;  // not owned
  const WorkerConnectionOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kvserve::v1::Worker::Stub> stub_;
  std::thread thread_;
  std::thread watchdog_;

  mutable absl::Mutex mu_;
  // When the status stream in flight last delivered a message (or opened).
  absl::Time last_status_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool status_stream_open_ ABSL_GUARDED_BY(mu_) = false;
  bool liveness_expired_ ABSL_GUARDED_BY(mu_) = false;  // the watchdog cancelled the stream
  uint64_t next_call_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, TrackedCall> calls_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;  // the call in flight, if any
  std::optional<kvserve::v1::ModelInfo> model_info_ ABSL_GUARDED_BY(mu_);
  std::string refused_reason_ ABSL_GUARDED_BY(mu_);  // the last refusal logged
  // The log's view of the link (the status thread's only).
  LinkState link_ = LinkState::kNew;
  absl::Time down_since_;        // when link_ left kUp
  absl::Time last_down_log_;     // the last line saying it is down
  int64_t failed_attempts_ = 0;  // since link_ left kUp
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_WORKER_CONNECTION_H_
