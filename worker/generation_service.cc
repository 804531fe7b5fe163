#include "worker/generation_service.h"

#include <utility>

#include "api/raw_message.h"
#include "api/unary_call.h"
#include "worker/generate_reactor.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerationService::Generate(
    grpc::CallbackServerContext* /*call*/, const grpc::ByteBuffer* request) {
  v1::GenerateRequest parsed;
  absl::Status status = ParseRequest(*request, &parsed);
  if (!status.ok()) {
    if (context_->metrics() != nullptr) context_->metrics()->RecordRejected(status.code());
    return GenerateReactor::Create(context_, status);
  }
  return GenerateReactor::Create(context_, context_->StartGenerate(parsed));
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(grpc::CallbackServerContext* call,
                                                      const grpc::ByteBuffer* request,
                                                      grpc::ByteBuffer* response) {
  v1::TokenizeRequest parsed;
  if (absl::Status status = ParseRequest(*request, &parsed); !status.ok()) {
    return FinishUnary<v1::TokenizeResponse>(call, status, response);
  }
  return FinishUnary(call, context_->Tokenize(parsed), response);
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(grpc::CallbackServerContext* call,
                                                        const grpc::ByteBuffer* request,
                                                        grpc::ByteBuffer* response) {
  v1::DetokenizeRequest parsed;
  if (absl::Status status = ParseRequest(*request, &parsed); !status.ok()) {
    return FinishUnary<v1::DetokenizeResponse>(call, status, response);
  }
  return FinishUnary(call, context_->Detokenize(parsed), response);
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(grpc::CallbackServerContext* call,
                                                          const grpc::ByteBuffer* request,
                                                          grpc::ByteBuffer* response) {
  v1::GetModelInfoRequest parsed;
  if (absl::Status status = ParseRequest(*request, &parsed); !status.ok()) {
    return FinishUnary<v1::ModelInfo>(call, status, response);
  }
  return FinishUnary(call, context_->GetModelInfo(parsed.model()), response);
}

}  // namespace kvserve
