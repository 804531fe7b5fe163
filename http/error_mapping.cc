#include "http/error_mapping.h"

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "api/status_conversion.h"

namespace kvserve {
namespace {

// `path` with `prefix` replaced by `replacement` when it starts with it (at a field boundary).
bool Rename(std::string* path, absl::string_view prefix, absl::string_view replacement) {
  if (!absl::StartsWith(*path, prefix)) return false;
  const absl::string_view rest = absl::string_view(*path).substr(prefix.size());
  if (!rest.empty() && rest[0] != '.' && rest[0] != '[') return false;
  *path = absl::StrCat(replacement, rest);
  return true;
}

}  // namespace

std::string OpenAiParam(absl::string_view path, absl::string_view input_field) {
  std::string param(path);
  if (Rename(&param, "chat.messages", "messages") || Rename(&param, "chat.tools", "tools") ||
      Rename(&param, "chat", "messages") ||
      // Structured output: the one field (of the forms it can come in) OpenAI clients know.
      Rename(&param, "sampling.structured_output", "response_format") ||
      Rename(&param, "prompt_token_ids.ids", "prompt") ||
      Rename(&param, "prompt_token_ids", "prompt") || Rename(&param, "token_ids", "tokens") ||
      Rename(&param, "input", input_field)) {
    return param;
  }
  if (absl::StartsWith(param, "sampling.")) return param.substr(9);
  return param;
}

HttpError ToHttpError(const absl::Status& status, absl::string_view input_field) {
  HttpError error;
  error.message = std::string(status.message());
  const std::optional<std::string> path = LeadingFieldPath(status.message());
  if (path.has_value()) {
    error.param = OpenAiParam(*path, input_field);
    // The message names the field as the request did: "sampling.max_tokens: ..." ->
    // "max_tokens: ...".
    error.message = absl::StrCat(*error.param, status.message().substr(path->size()));
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      error.http_status = 400;
      error.type = "invalid_request_error";
      break;
    case absl::StatusCode::kResourceExhausted:
      if (path.has_value()) {
        error.http_status = 400;
        error.type = "invalid_request_error";
        error.code = "context_length_exceeded";
      } else {
        error.http_status = 429;
        error.type = "rate_limit_error";
        error.code = "rate_limit_exceeded";
      }
      break;
    case absl::StatusCode::kUnauthenticated:
      error.http_status = 401;
      error.type = "authentication_error";
      error.code = "invalid_api_key";
      break;
    case absl::StatusCode::kPermissionDenied:
      error.http_status = 403;
      error.type = "permission_error";
      break;
    case absl::StatusCode::kNotFound:
      error.http_status = 404;
      error.type = "invalid_request_error";
      error.code = "model_not_found";
      if (!error.param.has_value()) error.param = "model";
      break;
    case absl::StatusCode::kUnavailable:
      error.http_status = 503;
      error.type = "service_unavailable_error";
      error.code = "service_unavailable";
      break;
    case absl::StatusCode::kDeadlineExceeded:
      error.http_status = 504;
      error.type = "timeout_error";
      error.code = "deadline_exceeded";
      break;
    case absl::StatusCode::kCancelled:
      error.http_status = 499;
      error.type = "cancelled";
      break;
    default:
      error.http_status = 500;
      error.type = "server_error";
      error.code = "internal_error";
      break;
  }
  return error;
}

std::string ErrorJson(const HttpError& error) {
  nlohmann::json body;
  nlohmann::json& inner = body["error"];
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.has_value() ? nlohmann::json(*error.param) : nlohmann::json();
  inner["code"] = error.code.has_value() ? nlohmann::json(*error.code) : nlohmann::json();
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvserve
