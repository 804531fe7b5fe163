// StatusReactor: serves one Worker.StreamStatus call from an engine StatusSubscription, in the
// same callback style as GenerateReactor: the subscription's notifier (engine thread) and
// OnWriteDone (gRPC thread) pump; each Pop takes everything pending, merged, and becomes one or
// more WorkerStatus messages (a large snapshot is split into parts, event batches follow the
// last part). Every message carries identity, epoch, capacity and the draining flag.
//
// The stream ends when the subscription does: UNAVAILABLE while the worker drains (worker.proto:
// a draining worker ends StreamStatus streams), OK otherwise. A cancel closes the subscription.
//
// Ownership: gRPC owns the reactor; it deletes itself in OnDone (late notifications go through a
// shared Link that OnDone clears).
//
// Thread-safety: all entry points synchronise on Link::mu, never held across a gRPC call.
#ifndef KVSERVE_WORKER_STATUS_REACTOR_H_
#define KVSERVE_WORKER_STATUS_REACTOR_H_

#include <grpcpp/support/server_callback.h>

#include <deque>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/status_subscription.h"
#include "kvserve/v1/worker.pb.h"
#include "worker/serving_context.h"

namespace kvserve {

class StatusReactor : public grpc::ServerWriteReactor<kvserve::v1::WorkerStatus> {
 public:
  // Parts of a snapshot hold at most this many blocks (~40 bytes each on the wire), keeping each
  // message far below gRPC's 4 MiB default.
  static constexpr int kMaxBlocksPerSnapshotPart = 16384;

  StatusReactor(ServingContext* context, std::shared_ptr<StatusSubscription> subscription);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Link {
    absl::Mutex mu;
    StatusReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };
  enum class Action { kNone, kWrite, kFinish };

  Action Plan();                // REQUIRES: link_->mu held
  void Execute(Action action);  // REQUIRES: link_->mu not held
  void Pump();
  // Turns one merged update into messages on outbox_. REQUIRES: link_->mu held.
  void Enqueue(const StatusUpdate& update);

  ServingContext* const context_;
  const std::shared_ptr<StatusSubscription> subscription_;
  const std::shared_ptr<Link> link_ = std::make_shared<Link>();
  // Guarded by link_->mu.
  std::deque<kvserve::v1::WorkerStatus> outbox_;
  kvserve::v1::WorkerStatus writing_;
  bool write_in_flight_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_STATUS_REACTOR_H_
