#include "worker/status_reactor.h"

#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "worker/proto_conversion.h"

namespace kvserve {

namespace v1 = ::kvserve::v1;

StatusReactor::StatusReactor(ServingContext* context,
                             std::shared_ptr<StatusSubscription> subscription,
                             std::string router_id, std::string peer)
    : context_(context),
      subscription_(std::move(subscription)),
      router_id_(std::move(router_id)),
      peer_(std::move(peer)) {
  KVSERVE_LOG(kInfo, "router_connected").Field("router", router_id_).Field("peer", peer_);
  subscription_->SetNotifier(Notifier());
  Pump();  // an update may already be waiting
}

void StatusReactor::Enqueue(const StatusUpdate& update) {
  v1::WorkerStatus common;
  *common.mutable_identity() = context_->identity();
  common.set_epoch(update.epoch);
  ToProto(update.stats, common.mutable_capacity());
  common.set_draining(update.draining || context_->draining());
  if (update.stats.failed) {
    common.set_failed(true);
    common.set_failure(std::string(context_->engine().failure().message()));
  }
  const int32_t block_size = update.stats.block_size;
  if (update.snapshot.has_value()) {
    for (v1::KvSnapshot& part :
         SnapshotParts(*update.snapshot, block_size, kMaxBlocksPerSnapshotPart)) {
      v1::WorkerStatus& message = outbox_.emplace_back(common);
      *message.mutable_snapshot() = std::move(part);
    }
  } else {
    outbox_.push_back(common);
  }
  v1::WorkerStatus& last = outbox_.back();
  for (const KvEventBatch& batch : update.batches) {
    if (batch.events.empty()) continue;
    ToProto(batch, block_size, last.add_event_batches());
  }
}

StatusReactor::Action StatusReactor::PlanNext() {
  if (outbox_.empty()) {
    StatusUpdate update;
    switch (subscription_->Pop(absl::ZeroDuration(), &update)) {
      case StatusSubscription::PopResult::kTimeout:
        return Action::kNone;
      case StatusSubscription::PopResult::kEnd:
        return FinishWith(context_->draining()
                              ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is draining")
                              : grpc::Status::OK);
      case StatusSubscription::PopResult::kUpdate:
        Enqueue(update);
        break;
    }
  }
  v1::WorkerStatus next = std::move(outbox_.front());
  outbox_.pop_front();
  return Write(std::move(next));
}

void StatusReactor::StopSource() { subscription_->Close(); }

void StatusReactor::OnDone() {
  subscription_->Close();
  KVSERVE_LOG(kInfo, "router_disconnected").Field("router", router_id_).Field("peer", peer_);
  WritePump::OnDone();  // deletes this
}

}  // namespace kvserve
