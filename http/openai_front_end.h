// OpenAiFrontEnd: the OpenAI-compatible HTTP API over a GenerationBackend. It is the
// HttpServer's handler: it routes
//   POST /v1/completions, POST /v1/chat/completions   (JSON body, or SSE with "stream": true)
//   GET  /v1/models                                    the served model and its aliases
//   GET  /v1/models/{id}                               one of them (404 for another id)
//   GET  /health                                       200 while the backend serves, else 503
//   POST /tokenize, POST /detokenize                   as vLLM has them
//   GET  /tokenizer_info                               vLLM's: eos / bos token text, context
//                                                      length (what evaluation harnesses that
//                                                      tokenize remotely read first)
// maps each request with openai_mapping.h / openai_response.h, and each backend error with
// error_mapping.h. Every route but /health needs Authenticate() to pass (the bearer token of
// "Authorization: Bearer ..." is in the CallContext). "X-Request-Id" (or the id the server made
// when none was sent, echoed in the response's X-Request-Id header) becomes the request id;
// "X-Request-Timeout-Ms" sets a deadline (504 when it passes; for a stream, an error event).
//
// A client that disconnects cancels its request at once (GenerationStream::Cancel).
//
// Thread-safety: Handle is called concurrently from the server's threads; the front end keeps
// no per-request state of its own outside each call object.
#ifndef KVSERVE_HTTP_OPENAI_FRONT_END_H_
#define KVSERVE_HTTP_OPENAI_FRONT_END_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "http/generation_backend.h"
#include "http/http_server.h"
#include "http/openai_mapping.h"

namespace kvserve {

struct OpenAiFrontEndOptions {
  // Names accepted besides ModelInfo.name and ModelInfo.aliases (--http_model_aliases).
  std::vector<std::string> model_aliases;
  int32_t default_completion_max_tokens = 16;
};

class OpenAiFrontEnd {
 public:
  // `backend` is borrowed and must outlive the HTTP server using this front end.
  OpenAiFrontEnd(GenerationBackend* backend, OpenAiFrontEndOptions options);

  void Handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange);

 private:
  // GET /v1/models (`id` empty) or GET /v1/models/{id}.
  void Models(const CallContext& call, absl::string_view id, HttpExchange& exchange);
  void Tokenize(const CallContext& call, const HttpRequest& request, HttpExchange& exchange);
  void Detokenize(const CallContext& call, const HttpRequest& request, HttpExchange& exchange);
  void TokenizerInfo(const CallContext& call, HttpExchange& exchange);
  void Generate(OpenAiEndpoint endpoint, const CallContext& call, const HttpRequest& request,
                std::shared_ptr<HttpExchange> exchange);
  // The mapping options, with the served model's name from the backend.
  absl::StatusOr<OpenAiMappingOptions> MappingOptions(const CallContext& call);

  GenerationBackend* const backend_;
  const OpenAiFrontEndOptions options_;
  const int64_t created_unix_s_;  // when this front end started: /v1/models' "created"
};

// Sends `status` as an OpenAI error JSON response.
void RespondError(HttpExchange& exchange, const absl::Status& status,
                  absl::string_view input_field = "prompt");

}  // namespace kvserve

#endif  // KVSERVE_HTTP_OPENAI_FRONT_END_H_
