// GenerateReactor: serves one server-streaming Generate call (Generation.Generate and
// Worker.Generate alike) from an engine RequestStream, on the shared WritePump (write_pump.h).
//
// Flow: the stream's notifier (engine thread) and OnWriteDone (gRPC thread) both pump, which
// writes the next EngineOutput as a GenerateResponse when no write is in flight; when the stream
// ends, the call finishes with the stream's final status. A client cancel or an expired deadline
// (OnCancel) aborts the engine request, which frees its KV blocks before the next step; the call
// then finishes once the engine has closed the stream.
//
// Ownership: gRPC owns the reactor; it deletes itself in OnDone (write_pump.h).
//
// Thread-safety: as WritePump: all entry points synchronise on its lock.
#ifndef KVSERVE_WORKER_GENERATE_REACTOR_H_
#define KVSERVE_WORKER_GENERATE_REACTOR_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/raw_message.h"
#include "api/request_id.h"
#include "worker/request_log.h"
#include "worker/serving_context.h"
#include "worker/write_pump.h"

namespace kvserve {

class GenerateReactor final : public WritePump<grpc::ByteBuffer> {
 public:
  // A reactor for `started`, or one that finishes at once with its error.
  static GenerateReactor* Create(ServingContext* context, absl::StatusOr<StartedRequest> started);

  // Parses the raw bytes of a Generate call (api/raw_message.h) and starts the request with
  // `start` (ServingContext::StartGenerate or StartWorkerGenerate), giving it the call's
  // x-request-id metadata. Bytes that do not parse are counted as a rejected request, logged and
  // refused. The call's initial metadata carries x-request-id back: the request's id when it
  // started, the one the call sent when it was refused.
  template <typename Request>
  static GenerateReactor* ParseAndStart(
      ServingContext* context, grpc::CallbackServerContext* call, const grpc::ByteBuffer& request,
      absl::StatusOr<StartedRequest> (ServingContext::*start)(const Request&, absl::string_view)) {
    const std::string metadata_id(RequestIdOf(*call));
    Request parsed;
    absl::StatusOr<StartedRequest> started;
    if (absl::Status status = ParseRequest(request, &parsed); !status.ok()) {
      if (context->metrics() != nullptr) context->metrics()->RecordRejected(status.code());
      LogRequestRefused(metadata_id, status);
      started = status;
    } else {
      started = (context->*start)(parsed, metadata_id);
    }
    if (started.ok()) {
      call->AddInitialMetadata(kRequestIdMetadata, started->client_request_id);
    } else if (IsMetadataSafe(metadata_id)) {
      call->AddInitialMetadata(kRequestIdMetadata, metadata_id);
    }
    return Create(context, std::move(started));
  }

 private:
  GenerateReactor(ServingContext* context, StartedRequest started);
  explicit GenerateReactor(const absl::Status& error);

  Action PlanNext() override;
  void StopSource() override;

  ServingContext* const context_ = nullptr;  // null: the call was refused
  const StartedRequest started_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_GENERATE_REACTOR_H_
