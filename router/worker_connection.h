// WorkerConnection: the router's link to one worker group leader: a gRPC channel (shared by the
// status stream and every request proxied there) and a thread that keeps the worker's books
// current from its Worker.StreamStatus stream.
//
// The thread loops: fetch the worker's ModelInfo (GetModelInfo), open StreamStatus, apply every
// message to ClusterBooks. When the books say the view lost sync (a sequence gap or a new epoch)
// it cancels the stream and reopens it at once for a fresh snapshot. When the stream breaks (the
// worker died, restarted, drained or the network failed) the worker is marked unreachable (not
// routable, its hashes dropped) and the thread reconnects with exponential backoff. Requests
// running on the worker notice the break on their own streams and migrate (generate_proxy.h).
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
  // Called after every change applied to the books (metrics refresh); may be empty.
  std::function<void()> on_books_changed;
};

class WorkerConnection {
 public:
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

 private:
  void Run();
  // One stream, to its end. Returns true when it ended because the books asked for a resync.
  bool StreamOnce();
  bool FetchModelInfo();
  // Sleeps up to `duration`; false when Stop() was called.
  bool SleepUnlessStopped(absl::Duration duration);
  void Changed() const;

  const std::string address_;
  ClusterBooks* const books_;  // not owned
  const WorkerConnectionOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<kvserve::v1::Worker::Stub> stub_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ ABSL_GUARDED_BY(mu_) = nullptr;  // the call in flight, if any
  std::optional<kvserve::v1::ModelInfo> model_info_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_WORKER_CONNECTION_H_
