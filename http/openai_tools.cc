#include "http/openai_tools.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve::openai {
namespace {

namespace v1 = ::kvserve::v1;

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

// The JSON schema of tool `tool`'s arguments ({"type": "object"} when it gives none).
Json ParametersSchema(const v1::ChatTool& tool) {
  if (tool.parameters().empty()) return Json{{"type", "object"}};
  return Json::parse(tool.parameters(), nullptr, /*allow_exceptions=*/false);
}

// A JSON schema given as an object or as its JSON text, as JSON text.
absl::StatusOr<std::string> SchemaText(const Json& schema, const std::string& path) {
  if (schema.is_object()) return schema.dump();
  if (schema.is_string()) return schema.get<std::string>();
  return WrongType(path, "an object (a JSON schema)", schema);
}

}  // namespace

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
    // At most one call per tool (one without parallel_tool_calls): a model free to add calls
    // can repeat them until max_tokens and never close the list.
    Json list = {{"type", "array"},
                 {"minItems", 1},
                 {"maxItems", out->parallel_tool_calls ? chat.tools_size() : 1},
                 {"items", {{"anyOf", any_of}}}};
    *constraint = list.dump();
  }
  return absl::OkStatus();
}

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

}  // namespace kvserve::openai
