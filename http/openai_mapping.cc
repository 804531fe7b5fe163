#include "http/openai_mapping.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "api/request_validation.h"
#include "base/status_macros.h"
#include "http/openai_json.h"
#include "http/openai_tools.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using openai::Fields;
using openai::Invalid;
using openai::Json;
using openai::ParseBody;
using openai::StructuredOutput;
using openai::ToolChoice;
using openai::ToolMessageFields;
using openai::Tools;
using openai::WrongType;

// float fields of SamplingParams: a JSON number that overflows float stays visible as inf, which
// validation refuses.
float ToFloat(double value) { return static_cast<float>(value); }

absl::StatusOr<std::vector<int32_t>> TokenIds(const Json& array, absl::string_view field) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (size_t i = 0; i < array.size(); ++i) {
    const Json& id = array[i];
    const std::string path = absl::StrCat(field, "[", i, "]");
    if (!id.is_number_integer()) return WrongType(path, "an integer token id", id);
    const int64_t value = id.get<int64_t>();
    if (value < std::numeric_limits<int32_t>::min() ||
        value > std::numeric_limits<int32_t>::max() ||
        (id.is_number_unsigned() &&
         id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))) {
      return Invalid(path, absl::StrCat("token id out of range, got ", id.dump()));
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

// The prompts of a completions request, each as a GenerateRequest with only its input set.
absl::StatusOr<std::vector<v1::GenerateRequest>> Prompts(const Fields& fields) {
  const Json* prompt = fields.Find("prompt");
  if (prompt == nullptr) return Invalid("prompt", "is required");
  std::vector<v1::GenerateRequest> requests;
  if (prompt->is_string()) {
    requests.emplace_back().set_prompt(prompt->get<std::string>());
    return requests;
  }
  if (!prompt->is_array()) {
    return WrongType("prompt", "a string, a list of strings or a list of token ids", *prompt);
  }
  if (prompt->empty()) return Invalid("prompt", "must not be empty");
  const Json& first = (*prompt)[0];
  if (first.is_number_integer()) {  // one prompt as token ids
    KVSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds(*prompt, "prompt"));
    requests.emplace_back().mutable_prompt_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
    return requests;
  }
  for (size_t i = 0; i < prompt->size(); ++i) {  // a batch of prompts
    const Json& item = (*prompt)[i];
    const std::string path = absl::StrCat("prompt[", i, "]");
    if (item.is_string()) {
      requests.emplace_back().set_prompt(item.get<std::string>());
    } else if (item.is_array()) {
      KVSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds(item, path));
      requests.emplace_back().mutable_prompt_token_ids()->mutable_ids()->Add(ids.begin(),
                                                                             ids.end());
    } else {
      return WrongType(path, "a string or a list of token ids", item);
    }
  }
  return requests;
}

absl::StatusOr<v1::ChatConversation> Messages(const Json* messages) {
  if (messages == nullptr) return Invalid("messages", "is required");
  if (!messages->is_array()) return WrongType("messages", "a list", *messages);
  v1::ChatConversation chat;
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& message = (*messages)[i];
    const std::string path = absl::StrCat("messages[", i, "]");
    if (!message.is_object()) return WrongType(path, "an object", message);
    Fields fields(message);
    std::optional<std::string> role;
    if (absl::Status s = fields.String("role", &role); !s.ok()) {
      return Invalid(absl::StrCat(path, ".role"), "must be a string");
    }
    if (!role.has_value()) return Invalid(absl::StrCat(path, ".role"), "is required");
    v1::ChatMessage* out = chat.add_messages();
    out->set_role(*role);
    KVSERVE_RETURN_IF_ERROR(ToolMessageFields(fields, path, out));
    const Json* content = fields.Find("content");
    if (content == nullptr) continue;  // absent or null: e.g. an assistant turn of tool calls
    if (content->is_string()) {
      out->set_content(content->get<std::string>());
      continue;
    }
    if (!content->is_array()) {
      return WrongType(absl::StrCat(path, ".content"), "a string or a list of parts", *content);
    }
    for (size_t k = 0; k < content->size(); ++k) {
      const Json& part = (*content)[k];
      const std::string part_path = absl::StrCat(path, ".content[", k, "]");
      if (!part.is_object()) return WrongType(part_path, "an object", part);
      auto type = part.find("type");
      auto text = part.find("text");
      if (type == part.end() || !type->is_string() || type->get<std::string>() != "text") {
        return Invalid(absl::StrCat(part_path, ".type"), "only \"text\" parts are supported");
      }
      if (text == part.end() || !text->is_string()) {
        return Invalid(absl::StrCat(part_path, ".text"), "must be a string");
      }
      out->mutable_content()->append(text->get<std::string>());
    }
  }
  return chat;
}

// Fields kvserve does not implement: refused when set to anything but their neutral value.
absl::Status Unsupported(const Fields& fields, int32_t n) {
  std::optional<int32_t> best_of;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("best_of", &best_of));
  if (best_of.has_value() && *best_of != n && *best_of != 1) {
    return Invalid("best_of", "is not supported (use n)");
  }
  std::optional<std::string> suffix;
  KVSERVE_RETURN_IF_ERROR(fields.String("suffix", &suffix));
  if (suffix.has_value() && !suffix->empty()) return Invalid("suffix", "is not supported");
  if (const Json* bias = fields.Find("logit_bias"); bias != nullptr && !bias->empty()) {
    return Invalid("logit_bias", "is not supported");
  }
  if (const Json* functions = fields.Find("functions");
      functions != nullptr && !functions->empty()) {
    return Invalid("functions", "is not supported (use tools)");
  }
  return absl::OkStatus();
}

absl::Status Stop(const Fields& fields, v1::SamplingParams* sampling) {
  const Json* stop = fields.Find("stop");
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    sampling->add_stop(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array()) return WrongType("stop", "a string or a list of strings", *stop);
  for (size_t i = 0; i < stop->size(); ++i) {
    if (!(*stop)[i].is_string()) {
      return WrongType(absl::StrCat("stop[", i, "]"), "a string", (*stop)[i]);
    }
    sampling->add_stop((*stop)[i].get<std::string>());
  }
  return absl::OkStatus();
}

// A float field of SamplingParams from the JSON number `name`, when present.
absl::Status FloatField(const Fields& fields, const char* name,
                        void (v1::SamplingParams::*set)(float), v1::SamplingParams* sampling) {
  std::optional<double> number;
  KVSERVE_RETURN_IF_ERROR(fields.Number(name, &number));
  if (number) (sampling->*set)(ToFloat(*number));
  return absl::OkStatus();
}

// temperature, top_p, top_k and min_p.
absl::Status SamplingNumbers(const Fields& fields, v1::SamplingParams* sampling) {
  KVSERVE_RETURN_IF_ERROR(
      FloatField(fields, "temperature", &v1::SamplingParams::set_temperature, sampling));
  KVSERVE_RETURN_IF_ERROR(FloatField(fields, "top_p", &v1::SamplingParams::set_top_p, sampling));
  std::optional<int32_t> top_k;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("top_k", &top_k));
  if (top_k) sampling->set_top_k(*top_k == -1 ? 0 : *top_k);  // vLLM: -1 = off
  return FloatField(fields, "min_p", &v1::SamplingParams::set_min_p, sampling);
}

// presence_penalty, frequency_penalty and repetition_penalty.
absl::Status Penalties(const Fields& fields, v1::SamplingParams* sampling) {
  KVSERVE_RETURN_IF_ERROR(
      FloatField(fields, "presence_penalty", &v1::SamplingParams::set_presence_penalty, sampling));
  KVSERVE_RETURN_IF_ERROR(FloatField(fields, "frequency_penalty",
                                     &v1::SamplingParams::set_frequency_penalty, sampling));
  return FloatField(fields, "repetition_penalty", &v1::SamplingParams::set_repetition_penalty,
                    sampling);
}

// n: the number of choices, in the request and in the response.
absl::Status ChoiceCount(const Fields& fields, const OpenAiMappingOptions& options,
                         v1::SamplingParams* sampling, OpenAiRequest* out) {
  std::optional<int32_t> n;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("n", &n));
  if (!n) return absl::OkStatus();
  // 0 would mean "default" in the proto; OpenAI refuses it.
  KVSERVE_RETURN_IF_ERROR(CheckCountRange("n", *n, 1, options.max_n));
  sampling->set_n(*n);
  out->n = *n;
  return absl::OkStatus();
}

// echo: completions only (chat's would mean something else).
absl::Status Echo(OpenAiEndpoint endpoint, const Fields& fields, OpenAiRequest* out) {
  std::optional<bool> echo;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("echo", &echo));
  if (!echo.value_or(false)) return absl::OkStatus();
  if (endpoint != OpenAiEndpoint::kCompletions) {
    return Invalid("echo", "is supported on /v1/completions only");
  }
  out->echo = true;
  return absl::OkStatus();
}

// max_tokens (max_completion_tokens, its newer name in chat), with the completions default;
// 0 with echo is the prompt alone (OpenAiRequest::prompt_only).
absl::Status Length(OpenAiEndpoint endpoint, const Fields& fields,
                    const OpenAiMappingOptions& options, v1::SamplingParams* sampling,
                    OpenAiRequest* out) {
  const char* length_field = "max_tokens";
  std::optional<int32_t> max_tokens;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("max_tokens", &max_tokens));
  if (endpoint == OpenAiEndpoint::kChatCompletions && !max_tokens.has_value()) {
    KVSERVE_RETURN_IF_ERROR(fields.Int32("max_completion_tokens", &max_tokens));
    length_field = "max_completion_tokens";
  }
  if (max_tokens && *max_tokens == 0 && out->echo) {
    sampling->set_max_tokens(1);  // generated, then left out of the response
    out->prompt_only = true;
  } else if (max_tokens) {
    // 0 would mean "to the end of the context" in the proto; OpenAI refuses it (but with echo).
    KVSERVE_RETURN_IF_ERROR(CheckCountRange(length_field, *max_tokens, 1, options.max_tokens));
    sampling->set_max_tokens(*max_tokens);
  } else if (endpoint == OpenAiEndpoint::kCompletions) {
    sampling->set_max_tokens(options.default_completion_max_tokens);
  }
  return absl::OkStatus();
}

absl::Status StopTokenIds(const Fields& fields, v1::SamplingParams* sampling) {
  const Json* ids = fields.Find("stop_token_ids");
  if (ids == nullptr) return absl::OkStatus();
  if (!ids->is_array()) return WrongType("stop_token_ids", "a list of token ids", *ids);
  KVSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> parsed, TokenIds(*ids, "stop_token_ids"));
  sampling->mutable_stop_token_ids()->Add(parsed.begin(), parsed.end());
  return absl::OkStatus();
}

// seed, ignore_eos, include_stop_str_in_output and skip_special_tokens.
absl::Status SeedAndFlags(const Fields& fields, v1::SamplingParams* sampling) {
  std::optional<int64_t> seed;
  KVSERVE_RETURN_IF_ERROR(fields.Int64("seed", &seed));
  if (seed) sampling->set_seed(static_cast<uint64_t>(*seed));  // negative: its bit pattern
  std::optional<bool> ignore_eos;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("ignore_eos", &ignore_eos));
  sampling->set_ignore_eos(ignore_eos.value_or(false));
  std::optional<bool> include_stop;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("include_stop_str_in_output", &include_stop));
  sampling->set_include_stop_str_in_output(include_stop.value_or(false));
  std::optional<bool> skip_special;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("skip_special_tokens", &skip_special));
  sampling->set_detokenize_special_tokens(!skip_special.value_or(true));
  return absl::OkStatus();
}

// logprobs (an integer in completions; a flag with top_logprobs in chat), in the request and in
// the response's shape.
absl::Status Logprobs(OpenAiEndpoint endpoint, const Fields& fields, v1::SamplingParams* sampling,
                      OpenAiRequest* out) {
  std::optional<int32_t> top;
  if (endpoint == OpenAiEndpoint::kCompletions) {
    KVSERVE_RETURN_IF_ERROR(fields.Int32("logprobs", &top));
    if (top) {
      sampling->set_logprobs(*top);
      out->logprobs = true;
      out->top_logprobs = *top;
    }
    return absl::OkStatus();
  }
  std::optional<bool> wanted;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("logprobs", &wanted));
  KVSERVE_RETURN_IF_ERROR(fields.Int32("top_logprobs", &top));
  if (top && !wanted.value_or(false)) return Invalid("top_logprobs", "needs logprobs: true");
  if (wanted.value_or(false)) {
    sampling->set_logprobs(top.value_or(0));
    out->logprobs = true;
    out->top_logprobs = top.value_or(0);
  }
  return absl::OkStatus();
}

// prompt_logprobs (vLLM's extra parameter); its range is the validation library's.
absl::Status PromptLogprobs(const Fields& fields, v1::SamplingParams* sampling,
                            OpenAiRequest* out) {
  std::optional<int32_t> top;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("prompt_logprobs", &top));
  if (top) {
    sampling->set_prompt_logprobs(*top);
    out->prompt_logprobs = *top;
  }
  return absl::OkStatus();
}

// Everything of SamplingParams, plus the parts of OpenAiRequest that shape the response. The
// fields are read in this order, so the first bad one is the error.
absl::Status Sampling(OpenAiEndpoint endpoint, const Fields& fields,
                      const OpenAiMappingOptions& options, v1::SamplingParams* sampling,
                      OpenAiRequest* out) {
  KVSERVE_RETURN_IF_ERROR(SamplingNumbers(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(Penalties(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(ChoiceCount(fields, options, sampling, out));
  KVSERVE_RETURN_IF_ERROR(Echo(endpoint, fields, out));
  KVSERVE_RETURN_IF_ERROR(Length(endpoint, fields, options, sampling, out));
  KVSERVE_RETURN_IF_ERROR(Stop(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(StopTokenIds(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(SeedAndFlags(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(StructuredOutput(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(Logprobs(endpoint, fields, sampling, out));
  return PromptLogprobs(fields, sampling, out);
}

}  // namespace

std::string ResolveModelName(absl::string_view model, const OpenAiMappingOptions& options) {
  for (const std::string& alias : options.aliases) {
    if (model == alias) return options.served_model;
  }
  return std::string(model);
}

namespace {

// The "model" field ("" when absent) as ResolveModelName reads it.
absl::StatusOr<std::string> ResolvedModel(const Fields& fields,
                                          const OpenAiMappingOptions& options) {
  std::optional<std::string> model;
  KVSERVE_RETURN_IF_ERROR(fields.String("model", &model));
  return ResolveModelName(model.value_or(""), options);
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body,
                                                 const OpenAiMappingOptions& options) {
  KVSERVE_ASSIGN_OR_RETURN(Json json, ParseBody(body));
  const Fields fields(json);
  OpenAiRequest out;
  out.endpoint = endpoint;

  std::optional<std::string> model;
  KVSERVE_RETURN_IF_ERROR(fields.String("model", &model));
  out.model = model.value_or("");

  std::vector<v1::GenerateRequest> requests;
  std::string tool_constraint;  // tool_choice required / named: the output's schema
  if (endpoint == OpenAiEndpoint::kCompletions) {
    KVSERVE_ASSIGN_OR_RETURN(std::vector<v1::GenerateRequest> prompts, Prompts(fields));
    requests = std::move(prompts);
  } else {
    KVSERVE_ASSIGN_OR_RETURN(v1::ChatConversation chat, Messages(fields.Find("messages")));
    KVSERVE_RETURN_IF_ERROR(Tools(fields, &chat));
    KVSERVE_RETURN_IF_ERROR(ToolChoice(fields, chat, &out, &tool_constraint));
    out.tool_call_format = options.tool_call_format;
    *requests.emplace_back().mutable_chat() = std::move(chat);
  }

  out.system_fingerprint = options.system_fingerprint;
  v1::GenerateRequest common;
  common.set_model(ResolveModelName(out.model, options));
  KVSERVE_RETURN_IF_ERROR(Sampling(endpoint, fields, options, common.mutable_sampling(), &out));
  if (!tool_constraint.empty()) {
    if (common.sampling().has_structured_output()) {
      return Invalid("tool_choice",
                     "\"required\" or a named function cannot be combined with "
                     "response_format or structured_outputs");
    }
    common.mutable_sampling()->mutable_structured_output()->set_json_schema(tool_constraint);
  }
  KVSERVE_RETURN_IF_ERROR(Unsupported(fields, out.n));
  std::optional<int32_t> priority;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("priority", &priority));
  common.set_priority(priority.value_or(0));
  std::optional<std::string> user;  // accepted for compatibility; kvserve does not use it
  KVSERVE_RETURN_IF_ERROR(fields.String("user", &user));
  std::optional<bool> flag;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("add_special_tokens", &flag));
  if (flag) common.set_add_special_tokens(*flag);
  flag.reset();
  if (endpoint == OpenAiEndpoint::kChatCompletions) {
    KVSERVE_RETURN_IF_ERROR(fields.Bool("add_generation_prompt", &flag));
    if (flag) common.set_add_generation_prompt(*flag);
    flag.reset();
  }
  std::optional<bool> stream;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("stream", &stream));
  out.stream = stream.value_or(false);
  if (const Json* stream_options = fields.Find("stream_options"); stream_options != nullptr) {
    if (!stream_options->is_object()) {
      return WrongType("stream_options", "an object", *stream_options);
    }
    std::optional<bool> include_usage;
    if (absl::Status s = Fields(*stream_options).Bool("include_usage", &include_usage); !s.ok()) {
      return Invalid("stream_options.include_usage", "must be a boolean");
    }
    out.include_usage = include_usage.value_or(false);
  }

  // The prompt's logprobs come in one piece once the prompt is computed: not as a stream.
  if (out.stream && out.echo) return Invalid("echo", "is not supported with stream");
  if (out.stream && out.prompt_logprobs >= 0) {
    return Invalid("prompt_logprobs", "is not supported with stream");
  }
  for (v1::GenerateRequest& request : requests) {
    v1::GenerateRequest merged = common;
    merged.MergeFrom(request);
    // echo writes the prompt's tokens (their logprobs with logprobs; their text for a prompt of
    // token ids) from the prompt's logprobs.
    v1::SamplingParams& sampling = *merged.mutable_sampling();
    if (out.echo && (out.logprobs || merged.has_prompt_token_ids()) &&
        sampling.prompt_logprobs() >= 0) {  // a negative one stays, for validation to refuse
      sampling.set_prompt_logprobs(std::max(sampling.prompt_logprobs(), out.top_logprobs));
    }
    out.requests.push_back(std::move(merged));
  }
  return out;
}

absl::StatusOr<v1::TokenizeRequest> ParseTokenizeRequest(absl::string_view body,
                                                         const OpenAiMappingOptions& options) {
  KVSERVE_ASSIGN_OR_RETURN(Json json, ParseBody(body));
  const Fields fields(json);
  v1::TokenizeRequest request;
  KVSERVE_ASSIGN_OR_RETURN(*request.mutable_model(), ResolvedModel(fields, options));
  if (fields.Find("messages") != nullptr) {
    KVSERVE_ASSIGN_OR_RETURN(v1::ChatConversation chat, Messages(fields.Find("messages")));
    KVSERVE_RETURN_IF_ERROR(Tools(fields, &chat));  // as vLLM's /tokenize takes them
    *request.mutable_chat() = std::move(chat);
  } else {
    std::optional<std::string> prompt;
    KVSERVE_RETURN_IF_ERROR(fields.String("prompt", &prompt));
    if (!prompt.has_value()) return Invalid("prompt", "prompt or messages is required");
    request.set_prompt(*prompt);
  }
  std::optional<bool> flag;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("add_special_tokens", &flag));
  if (flag) request.set_add_special_tokens(*flag);
  flag.reset();
  KVSERVE_RETURN_IF_ERROR(fields.Bool("add_generation_prompt", &flag));
  if (flag) request.set_add_generation_prompt(*flag);
  return request;
}

absl::StatusOr<v1::DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body,
                                                             const OpenAiMappingOptions& options) {
  KVSERVE_ASSIGN_OR_RETURN(Json json, ParseBody(body));
  const Fields fields(json);
  v1::DetokenizeRequest request;
  KVSERVE_ASSIGN_OR_RETURN(*request.mutable_model(), ResolvedModel(fields, options));
  const Json* tokens = fields.Find("tokens");
  if (tokens == nullptr) return Invalid("tokens", "is required");
  if (!tokens->is_array()) return WrongType("tokens", "a list of token ids", *tokens);
  KVSERVE_ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenIds(*tokens, "tokens"));
  request.mutable_token_ids()->Add(ids.begin(), ids.end());
  return request;
}

}  // namespace kvserve
