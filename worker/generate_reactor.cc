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

GenerateReactor::GenerateReactor(const absl::Status& error) { FinishNow(ToGrpcStatus(error)); }

GenerateReactor::GenerateReactor(ServingContext* context, StartedRequest started)
    : context_(context), started_(std::move(started)) {
  // Called at once when output is already waiting; later from the engine thread.
  started_.stream->SetNotifier(Notifier());
}

GenerateReactor::Action GenerateReactor::PlanNext() {
  EngineOutput output;
  switch (started_.stream->Pop(absl::ZeroDuration(), &output)) {
    case RequestStream::PopResult::kTimeout:
      return Action::kNone;  // nothing new; the notifier calls again
    case RequestStream::PopResult::kEnd:
      return FinishWith(ToGrpcStatus(started_.stream->final_status()));
    case RequestStream::PopResult::kOutput: {
      kvserve::v1::GenerateResponse response;
      ToProto(output, started_.client_request_id, &response);
      return Write(ToByteBuffer(response));
    }
  }
  return Action::kNone;
}

void GenerateReactor::StopSource() {
  // Frees the request's blocks before the engine's next step; its stream closes (the notifier
  // then finds the call cancelled).
  if (context_ != nullptr) context_->Abort(started_.engine_request_id);
}

}  // namespace kvserve
