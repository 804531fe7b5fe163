#include "worker/generation_service.h"

#include "worker/generate_reactor.h"

namespace kvserve {

namespace v1 = ::kvserve::v1;

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer* request) {
  return GenerateReactor::ParseAndStart(context_, call, *request, &ServingContext::StartGenerate);
}

absl::StatusOr<v1::TokenizeResponse> GenerationService::AnswerTokenize(
    const v1::TokenizeRequest& request) const {
  return context_->Tokenize(request);
}

absl::StatusOr<v1::DetokenizeResponse> GenerationService::AnswerDetokenize(
    const v1::DetokenizeRequest& request) const {
  return context_->Detokenize(request);
}

absl::StatusOr<v1::ModelInfo> GenerationService::AnswerGetModelInfo(
    const v1::GetModelInfoRequest& request) const {
  return context_->GetModelInfo(request.model());
}

}  // namespace kvserve
