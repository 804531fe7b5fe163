// The only file that includes minja: its exceptions end here, as absl::Status values.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/flag_file.h"
#include "base/status_macros.h"
#include "minja/minja.hpp"
#include "tokenizer/python_text.h"
#include "tokenizer/tool_prompt_fallback.h"

namespace kvserve {

struct ChatTemplate::Parsed {
  std::shared_ptr<minja::TemplateNode> root;
};

namespace {

using Json = nlohmann::ordered_json;

// Tool call arguments of the probe: a template renders them when its output shows the key
// unescaped (as JSON or as a Python dict), not double-encoded inside a string.
constexpr std::string_view kProbeArguments = R"({"argument_needle": "probe"})";
// A tool of the probe: a template renders tools when its output shows this name.
constexpr std::string_view kProbeTool =
    R"({"type": "function", "function": {"name": "tool_needle_probe", "description": "probe", )"
    R"("parameters": {"type": "object", "properties": {}}}})";
// The start of a rendering failure's message (not a raise_exception's).
constexpr absl::string_view kTemplateFailed = "chat template failed: ";

// A minja value as JSON: what json.dumps sees. Dict keys that are not strings are spelled as
// json.dumps spells them (true, null, 1).
Json ToJson(const minja::Value& value) {
  if (value.is_callable())
    throw std::runtime_error("Object of type function is not JSON serializable");
  if (value.is_array()) {
    Json out = Json::array();
    for (size_t i = 0; i < value.size(); ++i) out.push_back(ToJson(value.at(i)));
    return out;
  }
  if (value.is_object()) {
    Json out = Json::object();
    minja::Value keys_of = value;
    for (const minja::Value& key : keys_of.keys()) {
      const std::string name = key.is_string() ? key.get<std::string>() : key.get<Json>().dump();
      out[name] = ToJson(value.at(key));
    }
    return out;
  }
  return value.get<Json>();
}

// The Python string of a value, as str() writes it (Jinja2's filters turn their input into one).
std::string PythonStr(const minja::Value& value) {
  return value.is_string() ? value.get<std::string>() : value.to_str();
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
minja::Value ToJsonFilter(minja::ArgumentsValue& args) {
  if (args.args.empty()) throw std::runtime_error("tojson: no value to serialize");
  PythonJsonOptions options;
  const auto set = [&](const std::string& name, const minja::Value& v) {
    if (name == "ensure_ascii") {
      options.ensure_ascii = v.to_bool();
    } else if (name == "indent") {
      if (v.is_number_integer()) {
        options.indent = std::string(std::max<int64_t>(0, v.get<int64_t>()), ' ');
      } else if (v.is_string()) {
        options.indent = v.get<std::string>();
      } else if (!v.is_null()) {
        throw std::runtime_error("tojson: indent must be an integer or a string");
      }
    } else if (name == "separators") {
      if (v.is_null()) return;
      if (!v.is_array() || v.size() != 2) throw std::runtime_error("tojson: bad separators");
      options.item_separator = PythonStr(v.at(0));
      options.key_separator = PythonStr(v.at(1));
    } else if (name == "sort_keys") {
      options.sort_keys = v.to_bool();
    } else {
      throw std::runtime_error("tojson() got an unexpected keyword argument '" + name + "'");
    }
  };
  static const char* const kPositional[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
  if (args.args.size() > 1 + std::size(kPositional)) {
    throw std::runtime_error("tojson: too many arguments");
  }
  for (size_t i = 1; i < args.args.size(); ++i) set(kPositional[i - 1], args.args[i]);
  for (const auto& [name, v] : args.kwargs) set(name, v);
  return PythonJsonDumps(ToJson(args.args[0]), options);
}

// Jinja2's trim(value, chars=None): str(value).strip(chars).
minja::Value TrimFilter(minja::ArgumentsValue& args) {
  if (args.args.empty() || args.args.size() > 2) throw std::runtime_error("trim: bad arguments");
  std::optional<minja::Value> chars;
  if (args.args.size() == 2) chars = args.args[1];
  for (const auto& [name, v] : args.kwargs) {
    if (name != "chars") throw std::runtime_error("trim() got an unexpected argument " + name);
    chars = v;
  }
  const std::string text = PythonStr(args.args[0]);
  if (!chars.has_value() || chars->is_null()) return std::string(PythonStrip(text));
  return std::string(PythonStrip(text, PythonStr(*chars)));
}

Json MessageJson(const ChatMessage& message, bool object_arguments) {
  Json out = Json::object();
  out["role"] = message.role;
  out["content"] = message.content.has_value() ? Json(*message.content) : Json(nullptr);
  if (!message.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ChatToolCall& call : message.tool_calls) {
      Json arguments = call.arguments;
      if (object_arguments) {
        Json parsed = Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) arguments = std::move(parsed);
      }
      Json item = Json::object();
      if (!call.id.empty()) item["id"] = call.id;
      item["type"] = "function";
      item["function"] = Json{{"name", call.name}, {"arguments", std::move(arguments)}};
      calls.push_back(std::move(item));
    }
    out["tool_calls"] = std::move(calls);
  }
  if (!message.tool_call_id.empty()) out["tool_call_id"] = message.tool_call_id;
  if (!message.name.empty()) out["name"] = message.name;
  return out;
}

// The variables of a rendering, as transformers' apply_chat_template passes them (tools only
// when given).
absl::StatusOr<Json> Variables(absl::Span<const ChatMessage> messages, bool add_generation_prompt,
                               absl::Span<const std::string> tools, bool object_arguments,
                               const std::string& bos_token, const std::string& eos_token) {
  Json variables = Json::object();
  Json& messages_json = variables["messages"] = Json::array();
  for (const ChatMessage& message : messages) {
    messages_json.push_back(MessageJson(message, object_arguments));
  }
  if (!tools.empty()) {
    Json& tools_json = variables["tools"] = Json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
      Json tool = Json::parse(tools[i], nullptr, /*allow_exceptions=*/false);
      if (!tool.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat("tools[", i, "]: not a JSON object"));
      }
      tools_json.push_back(std::move(tool));
    }
  }
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["bos_token"] = bos_token;
  variables["eos_token"] = eos_token;
  return variables;
}

// The first line of minja's error, the innermost place: "<what> at row R, column C" (the
// lines after it quote the template source, once per enclosing block: kilobytes), at most 300
// bytes.
std::string FirstLine(absl::string_view error) {
  absl::string_view line = error.substr(0, error.find('\n'));
  if (!line.empty() && line.back() == ':') line.remove_suffix(1);
  if (line.size() > 300) return absl::StrCat(line.substr(0, 300), "...");
  return std::string(line);
}

absl::CivilSecond LocalNow() { return absl::ToCivilSecond(absl::Now(), absl::LocalTimeZone()); }

// Renders `root` with `variables` and the functions transformers defines; every error of minja
// becomes INVALID_ARGUMENT.
absl::StatusOr<std::string> RenderTemplate(const minja::TemplateNode& root, const Json& variables,
                                           const ChatTemplate::Clock& clock) {
  // raise_exception's message, kept apart: minja's error text appends the template location.
  auto raised = std::make_shared<std::optional<std::string>>();
  try {
    std::shared_ptr<minja::Context> context = minja::Context::make(minja::Value(variables));
    context->set("raise_exception",
                 minja::Value::callable([raised](const std::shared_ptr<minja::Context>&,
                                                 minja::ArgumentsValue& args) -> minja::Value {
                   *raised = args.args.empty() ? "" : PythonStr(args.args[0]);
                   throw std::runtime_error(**raised);
                 }));
    context->set("strftime_now",
                 minja::Value::callable([clock](const std::shared_ptr<minja::Context>&,
                                                minja::ArgumentsValue& args) -> minja::Value {
                   if (args.args.size() != 1 || !args.args[0].is_string()) {
                     throw std::runtime_error("strftime_now takes one format string");
                   }
                   const absl::CivilSecond now = clock ? clock() : LocalNow();
                   return absl::FormatTime(args.args[0].get<std::string>(),
                                           absl::FromCivil(now, absl::UTCTimeZone()),
                                           absl::UTCTimeZone());
                 }));
    context->set("tojson", minja::Value::callable(
                               [](const std::shared_ptr<minja::Context>&,
                                  minja::ArgumentsValue& args) { return ToJsonFilter(args); }));
    context->set("trim", minja::Value::callable(
                             [](const std::shared_ptr<minja::Context>&,
                                minja::ArgumentsValue& args) { return TrimFilter(args); }));
    return root.render(context);
  } catch (const std::exception& e) {
    if (raised->has_value()) return absl::InvalidArgumentError(**raised);
    return absl::InvalidArgumentError(absl::StrCat(kTemplateFailed, FirstLine(e.what())));
  } catch (...) {
    if (raised->has_value()) return absl::InvalidArgumentError(**raised);
    return absl::InvalidArgumentError("chat template failed");
  }
}

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const Parsed> parsed, std::string bos_token,
                           std::string eos_token, Clock clock)
    : parsed_(std::move(parsed)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      clock_(std::move(clock)) {}

absl::StatusOr<ChatTemplate> ChatTemplate::FromJinja(std::string_view jinja_source,
                                                     std::string bos_token, std::string eos_token,
                                                     Clock clock) {
  if (jinja_source.empty()) return absl::InvalidArgumentError("the model has no chat template");
  auto parsed = std::make_shared<Parsed>();
  try {
    parsed->root = minja::Parser::parse(
        std::string(jinja_source),
        minja::Options{.trim_blocks = true, .lstrip_blocks = true, .keep_trailing_newline = false});
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("chat template does not parse: ", e.what()));
  } catch (...) {
    return absl::InvalidArgumentError("chat template does not parse");
  }
  ChatTemplate chat(std::move(parsed), std::move(bos_token), std::move(eos_token),
                    std::move(clock));
  // Probes: render a call (arguments as text, then as an object) or a tool, and look for them.
  const auto render = [&chat](absl::Span<const ChatMessage> messages,
                              absl::Span<const std::string> tools,
                              bool as_object) -> std::optional<std::string> {
    absl::StatusOr<Json> variables =
        Variables(messages, false, tools, as_object, chat.bos_token_, chat.eos_token_);
    if (!variables.ok()) return std::nullopt;
    absl::StatusOr<std::string> text = RenderTemplate(*chat.parsed_->root, *variables, chat.clock_);
    if (!text.ok()) return std::nullopt;
    return *std::move(text);
  };
  ChatMessage call{.role = "assistant", .content = std::nullopt};
  call.tool_calls.push_back(
      {.id = "probe0001", .name = "probe_tool", .arguments = std::string(kProbeArguments)});
  const ChatMessage with_call[] = {{.role = "user", .content = "probe"}, call};
  const auto renders_arguments = [](const std::optional<std::string>& text) {
    return text.has_value() && (text->find("\"argument_needle\":") != std::string::npos ||
                                text->find("'argument_needle':") != std::string::npos);
  };
  const std::optional<std::string> as_text = render(with_call, {}, false);
  const std::optional<std::string> as_object = render(with_call, {}, true);
  chat.object_arguments_ = !renders_arguments(as_text) && renders_arguments(as_object);
  const std::optional<std::string>& shown = chat.object_arguments_ ? as_object : as_text;
  chat.renders_tool_calls_ = shown.has_value() && shown->find("probe_tool") != std::string::npos;
  const ChatMessage user[] = {{.role = "user", .content = "probe"}};
  const std::string tool[] = {std::string(kProbeTool)};
  const std::optional<std::string> with_tool = render(user, tool, false);
  chat.renders_tools_ =
      with_tool.has_value() && with_tool->find("tool_needle_probe") != std::string::npos;
  return chat;
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 absl::Span<const std::string> tools,
                                                 bool tool_fallback) const {
  const size_t client_messages = messages.size();
  const bool has_calls = std::any_of(messages.begin(), messages.end(),
                                     [](const ChatMessage& m) { return !m.tool_calls.empty(); });
  std::vector<ChatMessage> fallback;
  if (tool_fallback &&
      ((!tools.empty() && !renders_tools_) || (has_calls && !renders_tool_calls_))) {
    fallback = WithFallbackToolPrompt(messages, tools, !renders_tools_, !renders_tool_calls_);
    messages = fallback;
    if (!renders_tools_) tools = {};
  }
  KVSERVE_ASSIGN_OR_RETURN(Json variables, Variables(messages, add_generation_prompt, tools,
                                                     object_arguments_, bos_token_, eos_token_));
  absl::StatusOr<std::string> text = RenderTemplate(*parsed_->root, variables, clock_);
  if (text.ok() || !absl::StartsWith(text.status().message(), kTemplateFailed)) return text;
  // Which message: the first whose conversation up to it fails the same way (a template
  // refusing a short conversation for its length, with its own raise_exception, is not
  // searched).
  Json& messages_json = variables["messages"];
  const Json all = messages_json;
  // From no message at all: a template that fails so is at fault itself, not a message.
  for (size_t i = 0; i <= all.size(); ++i) {
    messages_json = Json(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(i));
    absl::StatusOr<std::string> prefix = RenderTemplate(*parsed_->root, variables, clock_);
    if (!prefix.ok() && prefix.status().message() == text.status().message()) {
      // Message i - 1 is the first at fault. A system message the fallback put first is not
      // the client's: count from the client's.
      const size_t offset = all.size() - client_messages;
      if (i == 0 || i - 1 < offset) break;
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i - 1 - offset, "]: ", text.status().message()));
    }
  }
  return text;
}

absl::StatusOr<std::string> ReadChatTemplateFile(const std::string& path) {
  KVSERVE_ASSIGN_OR_RETURN(std::string text, ReadFlagFile("--chat_template", path));
  if (absl::StatusOr<ChatTemplate> parsed = ChatTemplate::FromJinja(text, "", ""); !parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chat_template: '", path, "': ", parsed.status().message()));
  }
  return text;
}

}  // namespace kvserve
