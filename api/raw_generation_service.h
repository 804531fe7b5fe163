// RawGenerationService: kvserve.v1.Generation with every method on the request's raw bytes
// (gRPC's WithRawCallbackMethod_*), the base of the worker's GenerationService and the router's
// RouterService alike. Parsing the bytes is ours, not the generated deserializer's, so that
// invalid UTF-8 or a malformed message is refused as INVALID_ARGUMENT naming the field
// (raw_message.h) rather than INTERNAL with no message; and no thread is held per call.
//
// The unary methods are served here, one way for both: admit the call (Admit: the router checks
// its bearer token), parse the request, answer it through the subclass (the Answer* methods,
// absl::StatusOr inside) and finish with ToGrpcStatus (unary_call.h). Generate streams, so each
// subclass serves it itself.
//
// Thread-safety: gRPC calls the methods concurrently on its callback threads; subclasses must be
// thread-safe.
#ifndef KVSERVE_API_RAW_GENERATION_SERVICE_H_
#define KVSERVE_API_RAW_GENERATION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvserve/v1/generation.grpc.pb.h"

namespace kvserve {

using RawGenerationServiceBase = kvserve::v1::Generation::WithRawCallbackMethod_Generate<
    kvserve::v1::Generation::WithRawCallbackMethod_Tokenize<
        kvserve::v1::Generation::WithRawCallbackMethod_Detokenize<
            kvserve::v1::Generation::WithRawCallbackMethod_GetModelInfo<
                kvserve::v1::Generation::Service>>>>;

class RawGenerationService : public RawGenerationServiceBase {
 public:
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* call,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) final;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* call,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) final;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) final;

 protected:
  // Whether a unary call may go on, asked before its request is parsed; an error ends the call
  // with it. The default admits every call.
  virtual absl::Status Admit(const grpc::CallbackServerContext& call) const;

  // The answers to parsed, admitted requests.
  virtual absl::StatusOr<kvserve::v1::TokenizeResponse> AnswerTokenize(
      const kvserve::v1::TokenizeRequest& request) const = 0;
  virtual absl::StatusOr<kvserve::v1::DetokenizeResponse> AnswerDetokenize(
      const kvserve::v1::DetokenizeRequest& request) const = 0;
  virtual absl::StatusOr<kvserve::v1::ModelInfo> AnswerGetModelInfo(
      const kvserve::v1::GetModelInfoRequest& request) const = 0;

 private:
  // Admit, parse `request` as a Request, answer with `answer`, finish.
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* ServeUnary(
      grpc::CallbackServerContext* call, const grpc::ByteBuffer& request,
      grpc::ByteBuffer* response,
      absl::StatusOr<Response> (RawGenerationService::*answer)(const Request&) const);
};

}  // namespace kvserve

#endif  // KVSERVE_API_RAW_GENERATION_SERVICE_H_
