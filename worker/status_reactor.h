// StatusReactor: serves one Worker.StreamStatus call from an engine StatusSubscription, on the
// WritePump GenerateReactor uses too (write_pump.h): the subscription's notifier (engine thread)
// and OnWriteDone (gRPC thread) pump; each Pop takes everything pending, merged, and becomes one or
// more WorkerStatus messages (a large snapshot is split into parts, event batches follow the
// last part). Every message carries identity, epoch, capacity and the draining flag.
//
// The stream ends when the subscription does: UNAVAILABLE while the worker drains (worker.proto:
// a draining worker ends StreamStatus streams), OK otherwise. A cancel closes the subscription.
//
// Ownership: gRPC owns the reactor; it deletes itself in OnDone (write_pump.h).
//
// Thread-safety: as WritePump: all entry points synchronise on its lock.
#ifndef KVSERVE_WORKER_STATUS_REACTOR_H_
#define KVSERVE_WORKER_STATUS_REACTOR_H_

#include <deque>
#include <memory>
#include <string>

#include "engine/status_subscription.h"
#include "kvserve/v1/worker.pb.h"
#include "worker/serving_context.h"
#include "worker/write_pump.h"

namespace kvserve {

class StatusReactor final : public WritePump<kvserve::v1::WorkerStatus> {
 public:
  // Parts of a snapshot hold at most this many blocks (~40 bytes each on the wire), keeping each
  // message far below gRPC's 4 MiB default.
  static constexpr int kMaxBlocksPerSnapshotPart = 16384;

  // `router_id` (StatusRequest.router_id) and `peer` name the router in the log lines
  // router_connected (now) and router_disconnected (OnDone).
  StatusReactor(ServingContext* context, std::shared_ptr<StatusSubscription> subscription,
                std::string router_id, std::string peer);

  void OnDone() override;

 private:
  Action PlanNext() override;
  void StopSource() override;
  // Turns one merged update into messages on outbox_. REQUIRES: the pump's lock held.
  void Enqueue(const StatusUpdate& update);

  ServingContext* const context_;
  const std::shared_ptr<StatusSubscription> subscription_;
  const std::string router_id_;
  const std::string peer_;
  // Guarded by the pump's lock.
  std::deque<kvserve::v1::WorkerStatus> outbox_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_STATUS_REACTOR_H_
