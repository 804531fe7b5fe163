// The one place where an absl::Status from a GenerationBackend (the same codes and messages the
// gRPC API answers with) becomes an HTTP status and OpenAI's error JSON:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
//
//   INVALID_ARGUMENT, FAILED_PRECONDITION   400 invalid_request_error
//   RESOURCE_EXHAUSTED naming a field       400 invalid_request_error, code context_length_exceeded
//                                           (the request can never fit: prompt or max_tokens)
//   RESOURCE_EXHAUSTED otherwise            429 rate_limit_error, code rate_limit_exceeded
//   UNAUTHENTICATED                         401 authentication_error, code invalid_api_key
//   PERMISSION_DENIED                       403 permission_error
//   NOT_FOUND                               404 invalid_request_error, code model_not_found
//   UNAVAILABLE                             503 service_unavailable_error
//   DEADLINE_EXCEEDED                       504 timeout_error, code deadline_exceeded
//   CANCELLED                               499 (the client is gone; nobody reads it)
//   anything else                           500 server_error
//
// `param` is the field the status message starts with ("sampling.top_p: ..."), written as the
// OpenAI request names it ("top_p"; "chat.messages[1].role" -> "messages[1].role"; "input" ->
// the endpoint's input field, "prompt" or "messages"); null when the message names no field.
// `message` is the status message with its leading field written as `param`
// ("top_p: must be in (0, 1], got 0"), so HTTP and gRPC clients read the same words, each
// about the field of the request it sent.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_HTTP_ERROR_MAPPING_H_
#define KVSERVE_HTTP_ERROR_MAPPING_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvserve {

struct HttpError {
  int http_status = 500;
  std::string type;
  std::optional<std::string> param;
  std::optional<std::string> code;
  std::string message;
};

// REQUIRES: !status.ok(). `input_field`: what "input" stands for ("prompt" or "messages").
HttpError ToHttpError(const absl::Status& status, absl::string_view input_field = "prompt");

// The OpenAI field name for a kvserve field path (see above); unknown paths are returned as is.
std::string OpenAiParam(absl::string_view path, absl::string_view input_field);

// {"error": {...}} as compact JSON.
std::string ErrorJson(const HttpError& error);

}  // namespace kvserve

#endif  // KVSERVE_HTTP_ERROR_MAPPING_H_
