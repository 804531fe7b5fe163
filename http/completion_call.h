// CompletionCall: one /v1/completions or /v1/chat/completions request in flight, between the
// backend's GenerationStreams (one per prompt) and the HttpExchange.
//
// Each stream's notifier posts Pump() onto the connection's strand, which reads every message
// that is ready and either accumulates it (one JSON body at the end) or sends it at once as
// SSE chunks ("data: {...}\n\n", then "data: [DONE]\n\n"). An error ends the call: as an error
// response when nothing was sent yet, as an error event followed by [DONE] in a stream. The
// client disconnecting, or the deadline passing, cancels every stream at once.
//
// Ownership: the call owns itself (shared_ptr) from Start until it has answered; notifiers and
// callbacks hold weak pointers.
//
// Thread-safety: everything after Start runs on the connection's strand, except the notifiers,
// which only post.
#ifndef KVSERVE_HTTP_COMPLETION_CALL_H_
#define KVSERVE_HTTP_COMPLETION_CALL_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "http/generation_backend.h"
#include "http/http_server.h"
#include "http/openai_mapping.h"
#include "http/openai_response.h"

namespace kvserve {

class CompletionCall : public std::enable_shared_from_this<CompletionCall> {
 public:
  CompletionCall(OpenAiRequest request, std::string model, std::string request_id,
                 std::shared_ptr<HttpExchange> exchange);
  ~CompletionCall();

  // Submits every prompt to `backend` and starts answering. Call once, on the strand.
  void Start(GenerationBackend* backend, const CallContext& call);

 private:
  void SchedulePump();
  void Pump();
  // Ends the call with `status` (cancels what still runs).
  void Fail(const absl::Status& status);
  void CancelAll();
  void Finish();
  absl::string_view input_field() const;

  OpenAiRequest request_;
  OpenAiResponseBuilder builder_;
  std::shared_ptr<HttpExchange> exchange_;
  std::vector<std::unique_ptr<GenerationStream>> streams_;
  std::vector<bool> ended_;
  std::shared_ptr<CompletionCall> self_;  // alive until answered
  std::atomic<bool> pump_scheduled_{false};
  bool done_ = false;
  bool stream_started_ = false;  // SSE headers sent
};

}  // namespace kvserve

#endif  // KVSERVE_HTTP_COMPLETION_CALL_H_
