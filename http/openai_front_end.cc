#include "http/openai_front_end.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/serving_fingerprint.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "http/completion_call.h"
#include "http/error_mapping.h"
#include "http/openai_response.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using Json = nlohmann::json;

constexpr char kJson[] = "application/json";

// The call context of an HTTP request: bearer token, peer, and the deadline of
// X-Request-Timeout-Ms. INVALID_ARGUMENT for a malformed timeout header.
absl::StatusOr<CallContext> ContextOf(const HttpRequest& request) {
  CallContext call;
  call.peer = request.peer;
  call.request_id = request.request_id;
  for (const auto& [name, value] : request.headers) {
    if (name == "authorization") {
      call.authorization = value;
      break;
    }
  }
  const absl::string_view timeout = request.Header("x-request-timeout-ms");
  if (!timeout.empty()) {
    int64_t timeout_ms = 0;
    if (!absl::SimpleAtoi(timeout, &timeout_ms) || timeout_ms <= 0) {
      return absl::InvalidArgumentError(
          "X-Request-Timeout-Ms: must be a positive integer of milliseconds");
    }
    call.deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  }
  return call;
}

// 405 for a route asked with a method it does not take; Allow lists those it takes.
void MethodNotAllowed(absl::string_view path, bool post_route, HttpExchange& exchange) {
  HttpError error;
  error.http_status = 405;
  error.type = "invalid_request_error";
  error.message = absl::StrCat(path, " takes ", post_route ? "POST" : "GET");
  exchange.Respond(405, kJson, ErrorJson(error), {{"Allow", post_route ? "POST" : "GET, HEAD"}});
}

// `text` with each %XX replaced by its byte (a path segment as a client escapes it, e.g. a model
// id with a space or a '/'); a malformed escape stays as it is.
std::string PercentDecoded(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        absl::ascii_isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        absl::ascii_isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      int value = 0;
      (void)absl::SimpleHexAtoi(text.substr(i + 1, 2), &value);
      out.push_back(static_cast<char>(value));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

}  // namespace

void RespondError(HttpExchange& exchange, const absl::Status& status,
                  absl::string_view input_field) {
  const HttpError error = ToHttpError(status, input_field);
  exchange.Respond(error.http_status, kJson, ErrorJson(error));
}

OpenAiFrontEnd::OpenAiFrontEnd(GenerationBackend* backend, OpenAiFrontEndOptions options)
    : backend_(backend),
      options_(std::move(options)),
      created_unix_s_(absl::ToUnixSeconds(absl::Now())) {}

absl::StatusOr<OpenAiMappingOptions> OpenAiFrontEnd::MappingOptions(const CallContext& call) {
  KVSERVE_ASSIGN_OR_RETURN(v1::ModelInfo info, backend_->GetModelInfo(call, ""));
  OpenAiMappingOptions mapping;
  mapping.served_model = info.name();
  mapping.aliases.assign(info.aliases().begin(), info.aliases().end());
  mapping.aliases.insert(mapping.aliases.end(), options_.model_aliases.begin(),
                         options_.model_aliases.end());
  mapping.default_completion_max_tokens = options_.default_completion_max_tokens;
  mapping.system_fingerprint = SystemFingerprint(info);
  if (info.limits().max_tokens() > 0) mapping.max_tokens = info.limits().max_tokens();
  if (info.limits().max_n() > 0) mapping.max_n = info.limits().max_n();
  // A name this build does not know (a newer worker's): tool calls stay text.
  mapping.tool_call_format =
      ToolCallFormatFromName(info.tool_call_format()).value_or(ToolCallFormat::kNone);
  return mapping;
}

void OpenAiFrontEnd::Handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) {
  const std::string& path = request.path;
  // A GET route answers HEAD too (the server sends the headers only).
  const bool get_method = request.method == "GET" || request.method == "HEAD";
  if (path == "/health") {
    if (!get_method) {
      MethodNotAllowed(path, /*post_route=*/false, *exchange);
      return;
    }
    const bool serving = backend_->Serving();
    exchange->Respond(serving ? 200 : 503, kJson,
                      serving ? R"({"status":"serving"})" : R"({"status":"not serving"})");
    return;
  }
  const bool post_route = path == "/v1/completions" || path == "/v1/chat/completions" ||
                          path == "/tokenize" || path == "/detokenize";
  constexpr absl::string_view kModelPrefix = "/v1/models/";
  const bool model_route =
      absl::StartsWith(path, kModelPrefix) && path.size() > kModelPrefix.size();
  const bool get_route = path == "/v1/models" || path == "/tokenizer_info" || model_route;
  if (!post_route && !get_route) {
    HttpError error;
    error.http_status = 404;
    error.type = "invalid_request_error";
    error.message = absl::StrCat("no route ", path);
    exchange->Respond(404, kJson, ErrorJson(error));
    return;
  }
  if (post_route ? request.method != "POST" : !get_method) {
    MethodNotAllowed(path, post_route, *exchange);
    return;
  }
  absl::StatusOr<CallContext> call = ContextOf(request);
  if (!call.ok()) {
    RespondError(*exchange, call.status());
    return;
  }
  if (absl::Status s = backend_->Authenticate(*call); !s.ok()) {
    RespondError(*exchange, s);
    return;
  }
  if (path == "/v1/models") {
    Models(*call, "", *exchange);
  } else if (model_route) {
    Models(*call, PercentDecoded(absl::string_view(path).substr(kModelPrefix.size())), *exchange);
  } else if (path == "/tokenizer_info") {
    TokenizerInfo(*call, *exchange);
  } else if (path == "/tokenize") {
    Tokenize(*call, request, *exchange);
  } else if (path == "/detokenize") {
    Detokenize(*call, request, *exchange);
  } else {
    Generate(
        path == "/v1/completions" ? OpenAiEndpoint::kCompletions : OpenAiEndpoint::kChatCompletions,
        *call, request, std::move(exchange));
  }
}

void OpenAiFrontEnd::Models(const CallContext& call, absl::string_view id, HttpExchange& exchange) {
  absl::StatusOr<OpenAiMappingOptions> mapping = MappingOptions(call);
  if (!mapping.ok()) return RespondError(exchange, mapping.status(), "model");
  // An id that is neither the served name nor an alias: the backend's NOT_FOUND, as for a
  // generation request naming it.
  absl::StatusOr<v1::ModelInfo> info = backend_->GetModelInfo(call, ResolveModelName(id, *mapping));
  if (!info.ok()) return RespondError(exchange, info.status(), "model");
  auto entry = [&](const std::string& name) {
    return Json{{"id", name},
                {"object", "model"},
                {"created", created_unix_s_},
                {"owned_by", "kvserve"},
                {"root", info->name()},
                {"parent", nullptr},
                {"max_model_len", info->pool_limited_context_length()}};
  };
  if (!id.empty()) return exchange.Respond(200, kJson, DumpJson(entry(std::string(id))));
  std::vector<std::string> names = {mapping->served_model};
  names.insert(names.end(), mapping->aliases.begin(), mapping->aliases.end());
  Json data = Json::array();
  for (const std::string& name : names) data.push_back(entry(name));
  exchange.Respond(200, kJson, DumpJson({{"object", "list"}, {"data", data}}));
}

void OpenAiFrontEnd::Tokenize(const CallContext& call, const HttpRequest& request,
                              HttpExchange& exchange) {
  absl::StatusOr<OpenAiMappingOptions> mapping = MappingOptions(call);
  if (!mapping.ok()) return RespondError(exchange, mapping.status());
  absl::StatusOr<v1::TokenizeRequest> parsed = ParseTokenizeRequest(request.body, *mapping);
  if (!parsed.ok()) return RespondError(exchange, parsed.status());
  absl::StatusOr<v1::TokenizeResponse> response = backend_->Tokenize(call, *parsed);
  if (!response.ok()) {
    return RespondError(exchange, response.status(), parsed->has_chat() ? "messages" : "prompt");
  }
  absl::StatusOr<v1::ModelInfo> info = backend_->GetModelInfo(call, "");
  Json body;
  body["tokens"] =
      Json(std::vector<int32_t>(response->token_ids().begin(), response->token_ids().end()));
  body["count"] = response->token_ids_size();
  body["max_model_len"] = info.ok() ? info->pool_limited_context_length() : 0;
  exchange.Respond(200, kJson, DumpJson(body));
}

void OpenAiFrontEnd::Detokenize(const CallContext& call, const HttpRequest& request,
                                HttpExchange& exchange) {
  absl::StatusOr<OpenAiMappingOptions> mapping = MappingOptions(call);
  if (!mapping.ok()) return RespondError(exchange, mapping.status());
  absl::StatusOr<v1::DetokenizeRequest> parsed = ParseDetokenizeRequest(request.body, *mapping);
  if (!parsed.ok()) return RespondError(exchange, parsed.status());
  absl::StatusOr<v1::DetokenizeResponse> response = backend_->Detokenize(call, *parsed);
  if (!response.ok()) return RespondError(exchange, response.status());
  exchange.Respond(200, kJson, DumpJson({{"prompt", response->text()}}));
}

void OpenAiFrontEnd::TokenizerInfo(const CallContext& call, HttpExchange& exchange) {
  absl::StatusOr<v1::ModelInfo> info = backend_->GetModelInfo(call, "");
  if (!info.ok()) return RespondError(exchange, info.status());
  // A special token's text, as the tokenizer writes it (null for none).
  auto token_text = [&](std::optional<int32_t> id) -> absl::StatusOr<Json> {
    if (!id.has_value()) return Json();
    v1::DetokenizeRequest request;
    request.add_token_ids(*id);
    request.set_detokenize_special_tokens(true);
    absl::StatusOr<v1::DetokenizeResponse> text = backend_->Detokenize(call, request);
    if (!text.ok()) return text.status();
    return Json(text->text());
  };
  absl::StatusOr<Json> eos =
      token_text(info->eos_token_ids().empty() ? std::nullopt
                                               : std::optional<int32_t>(info->eos_token_ids(0)));
  if (!eos.ok()) return RespondError(exchange, eos.status());
  absl::StatusOr<Json> bos = token_text(
      info->has_bos_token_id() ? std::optional<int32_t>(info->bos_token_id()) : std::nullopt);
  if (!bos.ok()) return RespondError(exchange, bos.status());
  exchange.Respond(200, kJson,
                   DumpJson({{"tokenizer_class", "kvserve"},
                             {"model", info->name()},
                             {"eos_token", *eos},
                             {"bos_token", *bos},
                             {"pad_token", Json()},
                             {"model_max_length", info->pool_limited_context_length()}}));
}

void OpenAiFrontEnd::Generate(OpenAiEndpoint endpoint, const CallContext& call,
                              const HttpRequest& request, std::shared_ptr<HttpExchange> exchange) {
  const absl::string_view input_field =
      endpoint == OpenAiEndpoint::kChatCompletions ? "messages" : "prompt";
  absl::StatusOr<OpenAiMappingOptions> mapping = MappingOptions(call);
  if (!mapping.ok()) return RespondError(*exchange, mapping.status(), input_field);
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, request.body, *mapping);
  if (!parsed.ok()) {
    // Refused before any backend saw it: the front end's own request_refused line, as router
    // and worker write one for what they refuse.
    KVSERVE_LOG(kWarning, "request_refused")
        .Field("id", request.request_id)
        .Field("reason", absl::AsciiStrToLower(absl::StatusCodeToString(parsed.status().code())))
        .Status(parsed.status());
    return RespondError(*exchange, parsed.status(), input_field);
  }
  // The X-Request-Id the response echoes (the server made one when none was sent): the
  // request's id everywhere, in the response's "id" and in the log lines of router and worker.
  for (v1::GenerateRequest& prompt : parsed->requests) prompt.set_request_id(request.request_id);
  std::string model = parsed->model.empty() ? mapping->served_model : parsed->model;
  auto call_state = std::make_shared<CompletionCall>(*std::move(parsed), std::move(model),
                                                     request.request_id, std::move(exchange));
  call_state->Start(backend_, call);
}

}  // namespace kvserve
