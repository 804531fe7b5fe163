#include "worker/status_reactor.h"

#include <string>
#include <utility>
#include <vector>

#include "worker/proto_conversion.h"

namespace kvserve {

namespace v1 = ::kvserve::v1;

StatusReactor::StatusReactor(ServingContext* context,
                             std::shared_ptr<StatusSubscription> subscription)
    : context_(context), subscription_(std::move(subscription)) {
  {
    absl::MutexLock lock(&link_->mu);
    link_->reactor = this;
  }
  subscription_->SetNotifier([link = link_] {
    StatusReactor* reactor = nullptr;
    Action action = Action::kNone;
    {
      absl::MutexLock lock(&link->mu);
      if (link->reactor == nullptr) return;
      reactor = link->reactor;
      action = reactor->Plan();
    }
    reactor->Execute(action);
  });
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

StatusReactor::Action StatusReactor::Plan() {
  if (finished_ || write_in_flight_) return Action::kNone;
  if (cancelled_) {
    finished_ = true;
    final_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
    return Action::kFinish;
  }
  if (outbox_.empty()) {
    StatusUpdate update;
    switch (subscription_->Pop(absl::ZeroDuration(), &update)) {
      case StatusSubscription::PopResult::kTimeout:
        return Action::kNone;
      case StatusSubscription::PopResult::kEnd:
        finished_ = true;
        final_status_ = context_->draining()
                            ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is draining")
                            : grpc::Status::OK;
        return Action::kFinish;
      case StatusSubscription::PopResult::kUpdate:
        Enqueue(update);
        break;
    }
  }
  writing_ = std::move(outbox_.front());
  outbox_.pop_front();
  write_in_flight_ = true;
  return Action::kWrite;
}

void StatusReactor::Execute(Action action) {
  if (action == Action::kWrite) StartWrite(&writing_);
  if (action == Action::kFinish) Finish(final_status_);
}

void StatusReactor::Pump() {
  Action action;
  {
    absl::MutexLock lock(&link_->mu);
    action = Plan();
  }
  Execute(action);
}

void StatusReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&link_->mu);
    write_in_flight_ = false;
    if (!ok) cancelled_ = true;
  }
  if (!ok) subscription_->Close();
  Pump();
}

void StatusReactor::OnCancel() {
  {
    absl::MutexLock lock(&link_->mu);
    cancelled_ = true;
  }
  subscription_->Close();
  Pump();
}

void StatusReactor::OnDone() {
  {
    absl::MutexLock lock(&link_->mu);
    link_->reactor = nullptr;
  }
  subscription_->Close();
  delete this;
}

}  // namespace kvserve
