// GenerationBackend: what an HTTP front end calls to serve a request, independent of the
// transport behind it. The worker implements it over its engine (worker/http_backend.h); the
// router is meant to implement it over its proxy, so both front ends share one OpenAI mapping
// (openai_mapping.h) and one HTTP server (http_server.h) and never a copy of the serving logic.
//
// Requests and responses are the public kvserve.v1 protos: the front end maps OpenAI JSON to a
// GenerateRequest, the backend validates it with the one validation library (api/), exactly as
// its gRPC service does, and streams GenerateResponse messages back.
//
// Errors are absl::Status values with the same codes and messages as the gRPC API
// (generation.proto); error_mapping.h turns them into HTTP statuses and OpenAI error JSON.
//
// Thread-safety: implementations are thread-safe; calls come from the HTTP server's threads.
#ifndef KVSERVE_HTTP_GENERATION_BACKEND_H_
#define KVSERVE_HTTP_GENERATION_BACKEND_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/output.pb.h"

namespace kvserve {

// One call, as any transport sees it: the gRPC front ends fill it from grpc::ServerContext, the
// HTTP one from the request's headers.
struct CallContext {
  absl::Time deadline = absl::InfiniteFuture();  // after it: DEADLINE_EXCEEDED
  // The "Authorization" header as sent ("Bearer <token>"); nullopt when none was sent. Backends
  // read it with api/bearer_token.h, the one rule for both transports.
  std::optional<std::string> authorization;
  std::string peer;        // "ip:port" of the client, for logs
  std::string request_id;  // the HTTP request's X-Request-Id (HttpRequest::request_id), for logs
};

// The output of one Generate call. The producer (engine, proxy) calls the notifier whenever a
// message or the end is ready; the consumer then Read()s until kEmpty. Read never blocks.
class GenerationStream {
 public:
  enum class ReadResult {
    kMessage,  // *out holds the next message
    kEmpty,    // nothing now; the notifier will be called again
    kEnd,      // no more messages; final_status() says how it ended
  };

  virtual ~GenerationStream() = default;

  // Called (on a producer thread, must be cheap and never block) after new output and after the
  // end. If output or the end is already there, it is called once at once. Set it once.
  virtual void SetNotifier(std::function<void()> notifier) = 0;
  virtual ReadResult Read(kvserve::v1::GenerateResponse* out) = 0;
  // OK after the message with usage; the error otherwise. REQUIRES: Read returned kEnd.
  virtual absl::Status final_status() const = 0;
  // Stops the request now (client gone, deadline): its resources (KV blocks) are freed and the
  // stream ends (CANCELLED). Idempotent; harmless after the end.
  virtual void Cancel() = 0;
};

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;

  // OK when the call's credentials may use the API; UNAUTHENTICATED otherwise.
  virtual absl::Status Authenticate(const CallContext& call) const = 0;
  // Whether new requests can be served now (not draining, engine / workers healthy).
  virtual bool Serving() const = 0;

  virtual absl::StatusOr<std::unique_ptr<GenerationStream>> Generate(
      const CallContext& call, const kvserve::v1::GenerateRequest& request) = 0;
  virtual absl::StatusOr<kvserve::v1::TokenizeResponse> Tokenize(
      const CallContext& call, const kvserve::v1::TokenizeRequest& request) = 0;
  virtual absl::StatusOr<kvserve::v1::DetokenizeResponse> Detokenize(
      const CallContext& call, const kvserve::v1::DetokenizeRequest& request) = 0;
  // NOT_FOUND for a model that is not served; "" is the served model.
  virtual absl::StatusOr<kvserve::v1::ModelInfo> GetModelInfo(const CallContext& call,
                                                              absl::string_view model) = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_HTTP_GENERATION_BACKEND_H_
