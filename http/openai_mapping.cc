#include "http/openai_mapping.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
// Ordered: tool schemas reach the chat template with their keys in the client's order.
using Json = nlohmann::ordered_json;

absl::Status Invalid(absl::string_view field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

const char* TypeName(const Json& value) {
  if (value.is_number_integer()) return "integer";
  return value.type_name();  // "null", "boolean", "string", "array", "object", "number"
}

absl::Status WrongType(absl::string_view field, absl::string_view expected, const Json& value) {
  return Invalid(field, absl::StrCat("must be ", expected, ", got ", TypeName(value)));
}

absl::StatusOr<Json> ParseBody(absl::string_view body) {
  Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // Parse again for the parser's message (byte position, invalid UTF-8, ...); no exception
    // leaves this function.
    try {
      const Json ignored = Json::parse(body.begin(), body.end());
      (void)ignored;
    } catch (const Json::parse_error& e) {
      return Invalid("body", absl::StrCat("not valid JSON: ", e.what()));
    }
    return Invalid("body", "not valid JSON");
  }
  if (!json.is_object()) return WrongType("body", "a JSON object", json);
  return json;
}

// Typed access to the fields of a request object; null counts as absent.
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  const Json* Find(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  absl::Status String(const char* name, std::optional<std::string>* out) const {
    return Typed(name, &Json::is_string, "a string", out);
  }

  absl::Status Bool(const char* name, std::optional<bool>* out) const {
    return Typed(name, &Json::is_boolean, "a boolean", out);
  }

  absl::Status Number(const char* name, std::optional<double>* out) const {
    return Typed(name, &Json::is_number, "a number", out);
  }

  absl::Status Int64(const char* name, std::optional<int64_t>* out) const {
    const Json* value = Find(name);
    if (value == nullptr) return absl::OkStatus();
    if (value->is_number_unsigned() &&
        value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Invalid(name, "integer out of range");
    }
    if (!value->is_number_integer()) return WrongType(name, "an integer", *value);
    *out = value->get<int64_t>();
    return absl::OkStatus();
  }

  // An integer that fits int32; range rules beyond that are the validation library's.
  absl::Status Int32(const char* name, std::optional<int32_t>* out) const {
    std::optional<int64_t> wide;
    KVSERVE_RETURN_IF_ERROR(Int64(name, &wide));
    if (!wide.has_value()) return absl::OkStatus();
    if (*wide < std::numeric_limits<int32_t>::min() ||
        *wide > std::numeric_limits<int32_t>::max()) {
      return Invalid(name, absl::StrCat("integer out of range, got ", *wide));
    }
    *out = static_cast<int32_t>(*wide);
    return absl::OkStatus();
  }

 private:
  // The field as T when `is_type` says it has the JSON type `expected` names.
  template <typename T>
  absl::Status Typed(const char* name, bool (Json::*is_type)() const, const char* expected,
                     std::optional<T>* out) const {
    const Json* value = Find(name);
    if (value == nullptr) return absl::OkStatus();
    if (!(value->*is_type)()) return WrongType(name, expected, *value);
    *out = value->get<T>();
    return absl::OkStatus();
  }

  const Json& object_;
};

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

// The "function" object of a tool or tool call `item` ({type: "function", function: {...}}),
// whose type may be left out of a call (type_required false).
absl::StatusOr<const Json*> FunctionOf(const Json& item, const std::string& path,
                                       bool type_required) {
  if (!item.is_object()) return WrongType(path, "an object", item);
  const Fields fields(item);
  std::optional<std::string> type;
  if (!fields.String("type", &type).ok() ||
      type.value_or(type_required ? "" : "function") != "function") {
    return Invalid(absl::StrCat(path, ".type"), "only \"function\" is supported");
  }
  const Json* function = fields.Find("function");
  if (function == nullptr || !function->is_object()) {
    return Invalid(absl::StrCat(path, ".function"), "an object is required");
  }
  return function;
}

// A message's tool_calls ([{id, type: "function", function: {name, arguments}}]), tool_call_id
// and name, when present. The rules on them (names, JSON arguments, roles) are CheckChat's.
absl::Status ToolMessageFields(const Fields& fields, const std::string& path,
                               v1::ChatMessage* out) {
  std::optional<std::string> tool_call_id, name;
  if (!fields.String("tool_call_id", &tool_call_id).ok()) {
    return Invalid(absl::StrCat(path, ".tool_call_id"), "must be a string");
  }
  if (!fields.String("name", &name).ok()) {
    return Invalid(absl::StrCat(path, ".name"), "must be a string");
  }
  out->set_tool_call_id(tool_call_id.value_or(""));
  out->set_name(name.value_or(""));
  const Json* calls = fields.Find("tool_calls");
  if (calls == nullptr || calls->is_null()) return absl::OkStatus();
  if (!calls->is_array()) {
    return WrongType(absl::StrCat(path, ".tool_calls"), "a list", *calls);
  }
  for (size_t k = 0; k < calls->size(); ++k) {
    const Json& call = (*calls)[k];
    const std::string call_path = absl::StrCat(path, ".tool_calls[", k, "]");
    KVSERVE_ASSIGN_OR_RETURN(const Json* function,
                             FunctionOf(call, call_path, /*type_required=*/false));
    const Fields call_fields(call);
    v1::ChatToolCall* out_call = out->add_tool_calls();
    std::optional<std::string> id, name, arguments;
    if (!call_fields.String("id", &id).ok()) {
      return Invalid(absl::StrCat(call_path, ".id"), "must be a string");
    }
    Fields function_fields(*function);
    if (!function_fields.String("name", &name).ok() || !name) {
      return Invalid(absl::StrCat(call_path, ".function.name"), "a string is required");
    }
    // OpenAI sends arguments as JSON text; an object is taken as well.
    if (const Json* args = function_fields.Find("arguments");
        args != nullptr && args->is_object()) {
      arguments = args->dump();
    } else if (!function_fields.String("arguments", &arguments).ok()) {
      return Invalid(absl::StrCat(call_path, ".function.arguments"),
                     "must be a string of JSON (or an object)");
    }
    out_call->set_id(id.value_or(""));
    out_call->set_name(*name);
    out_call->set_arguments(arguments.value_or(""));
  }
  return absl::OkStatus();
}

// tools: [{type: "function", function: {name, description, parameters}}] into the chat.
absl::Status Tools(const Fields& fields, v1::ChatConversation* chat) {
  const Json* tools = fields.Find("tools");
  if (tools == nullptr) return absl::OkStatus();
  if (!tools->is_array()) return WrongType("tools", "a list", *tools);
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string path = absl::StrCat("tools[", i, "]");
    KVSERVE_ASSIGN_OR_RETURN(const Json* function,
                             FunctionOf((*tools)[i], path, /*type_required=*/true));
    Fields function_fields(*function);
    std::optional<std::string> name, description;
    if (!function_fields.String("name", &name).ok() || !name) {
      return Invalid(absl::StrCat(path, ".function.name"), "a string is required");
    }
    if (!function_fields.String("description", &description).ok()) {
      return Invalid(absl::StrCat(path, ".function.description"), "must be a string");
    }
    v1::ChatTool* out = chat->add_tools();
    out->set_name(*name);
    out->set_description(description.value_or(""));
    if (const Json* parameters = function_fields.Find("parameters"); parameters != nullptr) {
      if (!parameters->is_object()) {
        return WrongType(absl::StrCat(path, ".function.parameters"), "an object", *parameters);
      }
      out->set_parameters(parameters->dump());
    }
  }
  return absl::OkStatus();
}

// The JSON schema of tool `tool`'s arguments ({"type": "object"} when it gives none).
Json ParametersSchema(const v1::ChatTool& tool) {
  if (tool.parameters().empty()) return Json{{"type", "object"}};
  return Json::parse(tool.parameters(), nullptr, /*allow_exceptions=*/false);
}

// tool_choice and parallel_tool_calls. "auto" (the default with tools) parses the output for
// the model's tool calls; "none" renders the tools but returns text. "required" and a named
// function constrain the output (structured output, as vLLM does it): a named function's output
// is its arguments object (schema: its parameters); "required" gives a JSON list of calls
// [{"name", "parameters"}], one call at least (exactly one without parallel_tool_calls), each
// valid for its function. `*constraint` gets that schema's JSON text.
absl::Status ToolChoice(const Fields& fields, const v1::ChatConversation& chat, OpenAiRequest* out,
                        std::string* constraint) {
  const bool has_tools = chat.tools_size() > 0;
  std::optional<bool> parallel;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("parallel_tool_calls", &parallel));
  out->parallel_tool_calls = parallel.value_or(true);
  const Json* choice = fields.Find("tool_choice");
  std::string mode = has_tools ? "auto" : "none";
  if (choice != nullptr && choice->is_object()) {
    KVSERVE_ASSIGN_OR_RETURN(const Json* function,
                             FunctionOf(*choice, "tool_choice", /*type_required=*/true));
    std::optional<std::string> name;
    if (!Fields(*function).String("name", &name).ok() || !name) {
      return Invalid("tool_choice.function.name", "a string is required");
    }
    for (const v1::ChatTool& tool : chat.tools()) {
      if (tool.name() != *name) continue;
      out->forced_tool = *name;
      out->parse_tool_calls = true;
      const Json schema = ParametersSchema(tool);
      if (!schema.is_object()) {
        return Invalid("tool_choice", "the function's parameters are not a JSON schema");
      }
      *constraint = schema.dump();
      return absl::OkStatus();
    }
    return Invalid("tool_choice.function.name",
                   absl::StrCat("\"", *name, "\" is not one of the tools"));
  }
  if (choice != nullptr) {
    if (!choice->is_string()) {
      return WrongType("tool_choice", "a string or {\"type\": \"function\", ...}", *choice);
    }
    mode = choice->get<std::string>();
  }
  if (mode != "auto" && mode != "none" && mode != "required") {
    return Invalid("tool_choice",
                   absl::StrCat("must be \"auto\", \"none\", \"required\" or a named function, "
                                "got \"",
                                mode, "\""));
  }
  if (mode != "none" && !has_tools) {
    return Invalid("tool_choice", absl::StrCat("\"", mode, "\" needs tools"));
  }
  out->parse_tool_calls = mode != "none";
  if (mode == "required") {
    out->tool_calls_required = true;
    Json any_of = Json::array();
    for (const v1::ChatTool& tool : chat.tools()) {
      const Json schema = ParametersSchema(tool);
      if (!schema.is_object()) {
        return Invalid("tools", "a function's parameters are not a JSON schema");
      }
      any_of.push_back(
          {{"type", "object"},
           {"properties", {{"name", {{"const", tool.name()}}}, {"parameters", schema}}},
           {"required", {"name", "parameters"}}});
    }
    Json list = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", any_of}}}};
    if (!out->parallel_tool_calls) list["maxItems"] = 1;
    *constraint = list.dump();
  }
  return absl::OkStatus();
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
  std::optional<bool> echo;
  KVSERVE_RETURN_IF_ERROR(fields.Bool("echo", &echo));
  if (echo.value_or(false)) return Invalid("echo", "is not supported");
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
absl::Status ChoiceCount(const Fields& fields, v1::SamplingParams* sampling, OpenAiRequest* out) {
  std::optional<int32_t> n;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("n", &n));
  if (!n) return absl::OkStatus();
  // 0 would mean "default" in the proto; OpenAI refuses it.
  if (*n < 1) return Invalid("n", absl::StrCat("must be >= 1, got ", *n));
  sampling->set_n(*n);
  out->n = *n;
  return absl::OkStatus();
}

// max_tokens (max_completion_tokens, its newer name in chat), with the completions default.
absl::Status Length(OpenAiEndpoint endpoint, const Fields& fields,
                    const OpenAiMappingOptions& options, v1::SamplingParams* sampling) {
  const char* length_field = "max_tokens";
  std::optional<int32_t> max_tokens;
  KVSERVE_RETURN_IF_ERROR(fields.Int32("max_tokens", &max_tokens));
  if (endpoint == OpenAiEndpoint::kChatCompletions && !max_tokens.has_value()) {
    KVSERVE_RETURN_IF_ERROR(fields.Int32("max_completion_tokens", &max_tokens));
    length_field = "max_completion_tokens";
  }
  if (max_tokens) {
    // 0 would mean "to the end of the context" in the proto; OpenAI refuses it.
    if (*max_tokens < 1) {
      return Invalid(length_field, absl::StrCat("must be >= 1, got ", *max_tokens));
    }
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

// A JSON schema given as an object or as its JSON text, as JSON text.
absl::StatusOr<std::string> SchemaText(const Json& schema, const std::string& path) {
  if (schema.is_object()) return schema.dump();
  if (schema.is_string()) return schema.get<std::string>();
  return WrongType(path, "an object (a JSON schema)", schema);
}

// Structured output, in any of the forms clients send it (one at most):
//   OpenAI: response_format {"type": "json_object"} | {"type": "json_schema", "json_schema":
//           {"name", "schema", "strict"}} | {"type": "text"} (free);
//   vLLM:   structured_outputs {"json": schema, "regex", "choice", "grammar", "json_object"},
//           and its older guided_json / guided_regex / guided_choice / guided_grammar.
absl::Status StructuredOutput(const Fields& fields, v1::SamplingParams* sampling) {
  v1::StructuredOutput out;
  int forms = 0;
  if (const Json* format = fields.Find("response_format"); format != nullptr) {
    if (!format->is_object()) return WrongType("response_format", "an object", *format);
    std::optional<std::string> type;
    if (!Fields(*format).String("type", &type).ok() || !type) {
      return Invalid("response_format.type", "a string is required");
    }
    if (*type == "json_object") {
      out.set_json_object(true);
      ++forms;
    } else if (*type == "json_schema") {
      const Json* spec = Fields(*format).Find("json_schema");
      if (spec == nullptr || !spec->is_object()) {
        return Invalid("response_format.json_schema", "an object is required");
      }
      const Json* schema = Fields(*spec).Find("schema");
      if (schema == nullptr) {
        return Invalid("response_format.json_schema.schema", "is required");
      }
      KVSERVE_ASSIGN_OR_RETURN(*out.mutable_json_schema(),
                               SchemaText(*schema, "response_format.json_schema.schema"));
      ++forms;
    } else if (*type != "text") {
      return Invalid("response_format.type",
                     absl::StrCat("must be text, json_object or json_schema, got \"", *type, "\""));
    }
  }
  // vLLM's forms: structured_outputs.<key> or guided_<key>.
  const Json* vllm = fields.Find("structured_outputs");
  if (vllm != nullptr && !vllm->is_object()) {
    return WrongType("structured_outputs", "an object", *vllm);
  }
  for (const char* key : {"json", "regex", "choice", "grammar", "json_object"}) {
    std::string path = absl::StrCat("structured_outputs.", key);
    const Json* value = vllm != nullptr ? Fields(*vllm).Find(key) : nullptr;
    if (value == nullptr) {
      path = absl::StrCat("guided_", key);
      value = fields.Find(path.c_str());
    }
    if (value == nullptr) continue;
    ++forms;
    const std::string k = key;
    if (k == "json") {
      KVSERVE_ASSIGN_OR_RETURN(*out.mutable_json_schema(), SchemaText(*value, path));
    } else if (k == "json_object") {
      if (!value->is_boolean()) return WrongType(path, "a boolean", *value);
      if (!value->get<bool>()) {
        --forms;
        continue;
      }
      out.set_json_object(true);
    } else if (k == "choice") {
      if (!value->is_array()) return WrongType(path, "a list of strings", *value);
      out.mutable_choice();  // set even when empty, for validation to refuse it
      for (size_t i = 0; i < value->size(); ++i) {
        if (!(*value)[i].is_string()) {
          return WrongType(absl::StrCat(path, "[", i, "]"), "a string", (*value)[i]);
        }
        out.mutable_choice()->add_choices((*value)[i].get<std::string>());
      }
    } else {
      if (!value->is_string()) return WrongType(path, "a string", *value);
      if (k == "regex") {
        out.set_regex(value->get<std::string>());
      } else {
        out.set_grammar(value->get<std::string>());
      }
    }
  }
  if (forms > 1) {
    return Invalid("response_format",
                   "give one structured output form (response_format, structured_outputs or "
                   "guided_*)");
  }
  if (forms == 1) *sampling->mutable_structured_output() = std::move(out);
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

// Everything of SamplingParams, plus the parts of OpenAiRequest that shape the response. The
// fields are read in this order, so the first bad one is the error.
absl::Status Sampling(OpenAiEndpoint endpoint, const Fields& fields,
                      const OpenAiMappingOptions& options, v1::SamplingParams* sampling,
                      OpenAiRequest* out) {
  KVSERVE_RETURN_IF_ERROR(SamplingNumbers(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(Penalties(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(ChoiceCount(fields, sampling, out));
  KVSERVE_RETURN_IF_ERROR(Length(endpoint, fields, options, sampling));
  KVSERVE_RETURN_IF_ERROR(Stop(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(StopTokenIds(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(SeedAndFlags(fields, sampling));
  KVSERVE_RETURN_IF_ERROR(StructuredOutput(fields, sampling));
  return Logprobs(endpoint, fields, sampling, out);
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

  for (v1::GenerateRequest& request : requests) {
    v1::GenerateRequest merged = common;
    merged.MergeFrom(request);
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
