// GenerateProxy: runs client Generate calls through the cluster, each as a GenerateCall
// (generate_call.h: a server-streaming callback reactor whose worker call is a callback client
// reactor, so no thread is held while a request waits for admission or streams). A call admits
// the request (AdmissionQueue: route now, or wait, or refuse), opens Worker.Generate on the chosen
// worker, forwards every message to the client (with the client's request id, and the request's
// usage in the last message), and keeps each choice's progress (request_progress.h).
//
// Migration: when the worker's stream fails without an error of the request's own making
// (UNAVAILABLE: the worker died, drained past its grace period, or the connection broke;
// INTERNAL: its engine failed, a worker failure like a crash, so the request moves too; also
// UNKNOWN / ABORTED, a stream that ends OK without usage, and RESOURCE_EXHAUSTED before
// any output), the request is admitted again excluding every worker that failed it, preferring
// the worker with the longest cached prefix, and resubmitted with each unfinished choice's
// generated tokens and emitted text bytes (worker.proto WorkerChoice). The seed was fixed before
// the first dispatch, so the continuation is the token sequence the first worker would have
// produced: the client sees one stream with nothing lost or repeated. At most `max_migrations`
// times per request. When no worker can take over (migrations exhausted, or no other worker is
// routable), the request ends with UNAVAILABLE, whether or not it already sent output (the
// tokens sent stand; a retry starts over). Only a request whose every choice already finished,
// and which lacks just its usage message, ends with usage and OK.
//
// Cancellation: each worker call's ClientContext is made with FromCallbackServerContext, so the
// client's deadline and cancellation propagate to it; the call's OnCancel (client cancel or
// deadline) also cancels the worker call, or removes the request from the admission queue, and a
// failed write to the client cancels the worker call too. A request's reservation in the books is
// released whenever its worker call ends, so nothing stays charged and no worker stream outlives
// the client's.
//
// Thread-safety: thread-safe; Start() is called concurrently from gRPC's callback threads.
#ifndef KVSERVE_ROUTER_GENERATE_PROXY_H_
#define KVSERVE_ROUTER_GENERATE_PROXY_H_

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/admission_queue.h"
#include "router/cluster_books.h"
#include "router/request_progress.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"

namespace kvserve {

class GenerateProxy {
 public:
  // Everything is borrowed and must outlive the proxy and every call it started.
  // REQUIRES: max_migrations >= 0.
  GenerateProxy(WorkerRegistry* registry, ClusterBooks* books, AdmissionQueue* queue,
                RouterMetrics* metrics, int max_migrations)
      : registry_(registry),
        books_(books),
        queue_(queue),
        metrics_(metrics),
        max_migrations_(max_migrations) {}

  // Starts running `request` for the client call `call`; gRPC owns the returned reactor, which
  // ends the call when the request ends.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Start(grpc::CallbackServerContext* call,
                                                    ProxiedRequest request);

  WorkerRegistry* registry() const { return registry_; }
  ClusterBooks* books() const { return books_; }
  AdmissionQueue* queue() const { return queue_; }
  RouterMetrics* metrics() const { return metrics_; }
  int max_migrations() const { return max_migrations_; }

  // Calls started and not yet ended (any transport). A GenerateCall counts itself in and out.
  void CallStarted();
  void CallEnded();
  // Waits until no call is running or `deadline` passed; true when none is running.
  bool WaitIdle(absl::Time deadline);

 private:
  WorkerRegistry* const registry_;
  ClusterBooks* const books_;
  AdmissionQueue* const queue_;
  RouterMetrics* const metrics_;
  const int max_migrations_;
  absl::Mutex mu_;
  int running_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// A reactor that ends its call at once with `status` (a request refused before it ran).
grpc::ServerWriteReactor<grpc::ByteBuffer>* RefuseGenerate(const grpc::Status& status);

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_GENERATE_PROXY_H_
