#include "worker/generate_reactor.h"

#include <utility>

#include "api/raw_message.h"
#include "api/status_conversion.h"
#include "kvserve/v1/output.pb.h"
#include "worker/proto_conversion.h"

namespace kvserve {

GenerateReactor* GenerateReactor::Create(ServingContext* context,
                                         absl::StatusOr<StartedRequest> started) {
  if (!started.ok()) return new GenerateReactor(started.status());
  return new GenerateReactor(context, *std::move(started));
}

GenerateReactor::GenerateReactor(const absl::Status& error) {
  finished_ = true;
  Finish(ToGrpcStatus(error));
}

GenerateReactor::GenerateReactor(ServingContext* context, StartedRequest started)
    : context_(context), started_(std::move(started)) {
  {
    absl::MutexLock lock(&link_->mu);
    link_->reactor = this;
  }
  // Called at once when output is already waiting; later from the engine thread.
  started_.stream->SetNotifier([link = link_] {
    GenerateReactor* reactor = nullptr;
    Action action = Action::kNone;
    {
      absl::MutexLock lock(&link->mu);
      if (link->reactor == nullptr) return;
      reactor = link->reactor;
      action = reactor->Plan();
    }
    reactor->Execute(action);
  });
}

GenerateReactor::Action GenerateReactor::Plan() {
  if (finished_ || write_in_flight_) return Action::kNone;
  if (cancelled_) {
    // The client is gone (the engine was told in OnCancel); nothing more can be written.
    finished_ = true;
    final_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled");
    return Action::kFinish;
  }
  EngineOutput output;
  switch (started_.stream->Pop(absl::ZeroDuration(), &output)) {
    case RequestStream::PopResult::kTimeout:
      return Action::kNone;  // nothing new; the notifier calls again
    case RequestStream::PopResult::kEnd:
      finished_ = true;
      final_status_ = ToGrpcStatus(started_.stream->final_status());
      return Action::kFinish;
    case RequestStream::PopResult::kOutput: {
      kvserve::v1::GenerateResponse response;
      ToProto(output, started_.client_request_id, &response);
      write_buffer_ = ToByteBuffer(response);
      write_in_flight_ = true;
      return Action::kWrite;
    }
  }
  return Action::kNone;
}

void GenerateReactor::Execute(Action action) {
  switch (action) {
    case Action::kNone:
      return;
    case Action::kWrite:
      StartWrite(&write_buffer_);
      return;
    case Action::kFinish:
      Finish(final_status_);
      return;
  }
}

void GenerateReactor::Pump() {
  Action action;
  {
    absl::MutexLock lock(&link_->mu);
    action = Plan();
  }
  Execute(action);
}

void GenerateReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&link_->mu);
    write_in_flight_ = false;
  }
  if (!ok) {
    OnCancel();  // the stream broke: treat it as a cancel (gRPC may also call OnCancel)
    return;
  }
  Pump();
}

void GenerateReactor::OnCancel() {
  if (context_ == nullptr) return;
  {
    absl::MutexLock lock(&link_->mu);
    cancelled_ = true;
  }
  // Frees the request's blocks before the engine's next step; its stream closes (the notifier
  // then finds the call cancelled).
  context_->Abort(started_.engine_request_id);
  Pump();
}

void GenerateReactor::OnDone() {
  {
    absl::MutexLock lock(&link_->mu);
    link_->reactor = nullptr;
  }
  delete this;
}

}  // namespace kvserve
