// WorkerService: kvserve.v1.Worker, the internal API a router uses on a worker group's leader:
// Generate (already tokenized, with the tenant's cache salt and per-choice resume points),
// StreamStatus (capacity + KV events for the router's books), GetModelInfo, and FetchKvBlocks
// (another worker takes KV blocks this one holds: kv_export_reactor.h). A thin transport
// over ServingContext; Generate takes raw bytes for the same reason as GenerationService.
//
// Thread-safety: gRPC calls the methods concurrently; ServingContext is thread-safe.
#ifndef KVSERVE_WORKER_WORKER_SERVICE_H_
#define KVSERVE_WORKER_WORKER_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "kvserve/v1/worker.grpc.pb.h"
#include "worker/serving_context.h"

namespace kvserve {

using WorkerServiceBase = kvserve::v1::Worker::WithRawCallbackMethod_Generate<
    kvserve::v1::Worker::WithCallbackMethod_StreamStatus<
        kvserve::v1::Worker::WithCallbackMethod_GetModelInfo<
            kvserve::v1::Worker::WithCallbackMethod_FetchKvBlocks<kvserve::v1::Worker::Service>>>>;

class WorkerService final : public WorkerServiceBase {
 public:
  explicit WorkerService(ServingContext* context) : context_(context) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerWriteReactor<kvserve::v1::WorkerStatus>* StreamStatus(
      grpc::CallbackServerContext* call, const kvserve::v1::StatusRequest* request) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const kvserve::v1::GetModelInfoRequest* request,
                                         kvserve::v1::ModelInfo* response) override;
  grpc::ServerWriteReactor<kvserve::v1::KvBlockData>* FetchKvBlocks(
      grpc::CallbackServerContext* call, const kvserve::v1::FetchKvBlocksRequest* request) override;

 private:
  ServingContext* const context_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_WORKER_SERVICE_H_
