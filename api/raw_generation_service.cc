#include "api/raw_generation_service.h"

#include "api/raw_message.h"
#include "api/unary_call.h"

namespace kvserve {

namespace v1 = ::kvserve::v1;

absl::Status RawGenerationService::Admit(const grpc::CallbackServerContext& /*call*/) const {
  return absl::OkStatus();
}

template <typename Request, typename Response>
grpc::ServerUnaryReactor* RawGenerationService::ServeUnary(
    grpc::CallbackServerContext* call, const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
    absl::StatusOr<Response> (RawGenerationService::*answer)(const Request&) const) {
  if (absl::Status admitted = Admit(*call); !admitted.ok()) {
    return FinishUnary<Response>(call, admitted, response);
  }
  Request parsed;
  if (absl::Status status = ParseRequest(request, &parsed); !status.ok()) {
    return FinishUnary<Response>(call, status, response);
  }
  return FinishUnary(call, (this->*answer)(parsed), response);
}

grpc::ServerUnaryReactor* RawGenerationService::Tokenize(grpc::CallbackServerContext* call,
                                                         const grpc::ByteBuffer* request,
                                                         grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RawGenerationService::AnswerTokenize);
}

grpc::ServerUnaryReactor* RawGenerationService::Detokenize(grpc::CallbackServerContext* call,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RawGenerationService::AnswerDetokenize);
}

grpc::ServerUnaryReactor* RawGenerationService::GetModelInfo(grpc::CallbackServerContext* call,
                                                             const grpc::ByteBuffer* request,
                                                             grpc::ByteBuffer* response) {
  return ServeUnary(call, *request, response, &RawGenerationService::AnswerGetModelInfo);
}

}  // namespace kvserve
