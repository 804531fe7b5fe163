#include "worker/worker_service.h"

#include "api/unary_call.h"
#include "worker/generate_reactor.h"
#include "worker/kv_export_reactor.h"
#include "worker/status_reactor.h"

namespace kvserve {

namespace v1 = ::kvserve::v1;

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerService::Generate(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) {
  return GenerateReactor::ParseAndStart(context_, call, *request,
                                        &ServingContext::StartWorkerGenerate);
}

grpc::ServerWriteReactor<v1::WorkerStatus>* WorkerService::StreamStatus(
    grpc::CallbackServerContext* call, const v1::StatusRequest* request) {
  // StatusRequest.min_interval_ms is not needed: the subscription coalesces whatever arrives
  // while a write is in flight, so a slow reader gets fewer, larger messages.
  if (context_->draining()) {
    class Refused : public grpc::ServerWriteReactor<v1::WorkerStatus> {
     public:
      Refused() { Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is draining")); }
      void OnDone() override { delete this; }
    };
    return new Refused();
  }
  return new StatusReactor(context_, context_->engine().SubscribeStatus(), request->router_id(),
                           call->peer());
}

grpc::ServerUnaryReactor* WorkerService::GetModelInfo(grpc::CallbackServerContext* call,
                                                      const v1::GetModelInfoRequest* request,
                                                      v1::ModelInfo* response) {
  return FinishUnary(call, context_->GetModelInfo(request->model()), response);
}

grpc::ServerWriteReactor<v1::KvBlockData>* WorkerService::FetchKvBlocks(
    grpc::CallbackServerContext* /*call*/, const v1::FetchKvBlocksRequest* request) {
  // A draining worker still sends: handing its blocks over is what a migration wants.
  return KvExportReactor::Start(&context_->engine(), context_->metrics(), *request);
}

}  // namespace kvserve
