// GenerationService: kvserve.v1.Generation served by one worker, so that a single worker is
// usable without a router (text / token ids / chat input, Tokenize, Detokenize, GetModelInfo).
// A thin transport: every method hands the request to ServingContext and converts the result;
// Generate streams through GenerateReactor. Every method takes raw bytes so that invalid UTF-8
// or a malformed message is refused as INVALID_ARGUMENT naming the field (api/raw_message.h),
// exactly as the router refuses it.
//
// Thread-safety: gRPC calls the methods concurrently; ServingContext is thread-safe.
#ifndef KVSERVE_WORKER_GENERATION_SERVICE_H_
#define KVSERVE_WORKER_GENERATION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "kvserve/v1/generation.grpc.pb.h"
#include "worker/serving_context.h"

namespace kvserve {

using GenerationServiceBase = kvserve::v1::Generation::WithRawCallbackMethod_Generate<
    kvserve::v1::Generation::WithRawCallbackMethod_Tokenize<
        kvserve::v1::Generation::WithRawCallbackMethod_Detokenize<
            kvserve::v1::Generation::WithRawCallbackMethod_GetModelInfo<
                kvserve::v1::Generation::Service>>>>;

class GenerationService final : public GenerationServiceBase {
 public:
  explicit GenerationService(ServingContext* context) : context_(context) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

 private:
  ServingContext* const context_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_GENERATION_SERVICE_H_
