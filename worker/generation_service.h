// GenerationService: kvserve.v1.Generation served by one worker, so that a single worker is
// usable without a router (text / token ids / chat input, Tokenize, Detokenize, GetModelInfo).
// A thin transport: every method hands the request to ServingContext; the unary methods are
// parsed and finished by RawGenerationService (api/raw_generation_service.h), as the router's
// are, and Generate streams through GenerateReactor.
//
// Thread-safety: gRPC calls the methods concurrently; ServingContext is thread-safe.
#ifndef KVSERVE_WORKER_GENERATION_SERVICE_H_
#define KVSERVE_WORKER_GENERATION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "api/raw_generation_service.h"
#include "worker/serving_context.h"

namespace kvserve {

class GenerationService final : public RawGenerationService {
 public:
  explicit GenerationService(ServingContext* context) : context_(context) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override;

 private:
  absl::StatusOr<kvserve::v1::TokenizeResponse> AnswerTokenize(
      const kvserve::v1::TokenizeRequest& request) const override;
  absl::StatusOr<kvserve::v1::DetokenizeResponse> AnswerDetokenize(
      const kvserve::v1::DetokenizeRequest& request) const override;
  absl::StatusOr<kvserve::v1::ModelInfo> AnswerGetModelInfo(
      const kvserve::v1::GetModelInfoRequest& request) const override;

  ServingContext* const context_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_GENERATION_SERVICE_H_
