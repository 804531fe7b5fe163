// ChatTemplate: a model's Jinja chat template (tokenizer.chat_template in GGUF metadata, or
// tokenizer_config.json / chat_template.jinja), parsed once and rendered with minja
// (third_party/minja), a C++ Jinja engine made for LLM chat templates. Rendering follows
// transformers' apply_chat_template, so a prompt is the text the model was trained on:
// trim_blocks and lstrip_blocks; the variables messages, tools (only when given),
// add_generation_prompt, bos_token and eos_token; the functions raise_exception and
// strftime_now; `tojson` and `trim` as Python's json.dumps and str.strip compute them.
// tests/tokenizer/chat_template_golden_test.cc pins real model templates byte for byte against
// Python's Jinja2 (goldens written by tests/tokenizer/chat_template_goldens.py).
//
// Tool call arguments come as JSON text, as OpenAI clients send them. Templates differ on what
// they take: most print the text, some (Llama 3.1, Qwen2.5) apply tojson and need an object.
// FromJinja tells them apart with one probe rendering, as llama.cpp does, and Render then hands
// the latter the parsed object (when the text is a JSON object).
//
// A template that ignores tools or tool calls (FromJinja probes it) can be given them through
// the fallback of tool_prompt_fallback.h (Render's tool_fallback; serving always asks for it),
// so the model always sees them. Without it, Render renders exactly as transformers does.
//
// The rendered text holds special-token text; Tokenizer::Encode turns it into their single ids.
//
// Thread-safety: immutable value (copies share the parsed template); Render may run
// concurrently.
#ifndef KVSERVE_TOKENIZER_CHAT_TEMPLATE_H_
#define KVSERVE_TOKENIZER_CHAT_TEMPLATE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/civil_time.h"
#include "absl/types/span.h"

namespace kvserve {

// One function call an assistant turn made (OpenAI: type "function").
struct ChatToolCall {
  std::string id;         // e.g. "call_abc"; empty: none given
  std::string name;       // the function's name
  std::string arguments;  // JSON text, e.g. "{\"location\": \"Paris\"}"
};

// {role, content} is a plain message; the fields after them default to "none" (so that brace
// initialisation may leave them out).
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  // nullopt: null, as OpenAI clients send it for an assistant turn of tool calls only.
  std::optional<std::string> content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant turns only
  std::string tool_call_id = {};              // role "tool": the call this result answers
  std::string name = {};                      // role "tool": the function's name
};

class ChatTemplate {
 public:
  // The local time strftime_now formats; tests fix it.
  using Clock = std::function<absl::CivilSecond()>;

  // Parses `jinja_source`. bos_token / eos_token: the text of the model's BOS / EOS tokens ("" when
  // it has none). `clock` null: the current local time. INVALID_ARGUMENT when the source is empty
  // ("the model has no chat template") or does not parse (minja's message, with the place).
  static absl::StatusOr<ChatTemplate> FromJinja(std::string_view jinja_source,
                                                std::string bos_token, std::string eos_token,
                                                Clock clock = nullptr);

  // The prompt for `messages`, ending with the assistant's header when add_generation_prompt.
  // `tools`: OpenAI tool objects ({"type": "function", "function": {...}}) as JSON text; empty:
  // the template sees no tools. INVALID_ARGUMENT when the template refuses the conversation
  // (raise_exception: exactly its message, e.g. "System role not supported"), when rendering
  // fails (one line: "messages[i]: chat template failed: <the template's error>", i the first
  // message the rendering fails at; without "messages[i]: " when no single message is at
  // fault), or when a tool is not a JSON object ("tools[i]: ...").
  // tool_fallback: when the template does not render tools (or tool calls), they reach the
  // model through tool_prompt_fallback.h; message indices in errors stay the caller's.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt,
                                     absl::Span<const std::string> tools = {},
                                     bool tool_fallback = false) const;

  // Whether tool call arguments reach the template as objects (see above).
  bool object_arguments() const { return object_arguments_; }
  // Whether the template shows the model `tools` / an assistant turn's tool calls; when not,
  // Render applies the fallback of tool_prompt_fallback.h.
  bool renders_tools() const { return renders_tools_; }
  bool renders_tool_calls() const { return renders_tool_calls_; }

 private:
  struct Parsed;  // minja's template tree; defined in chat_template.cc only

  ChatTemplate(std::shared_ptr<const Parsed> parsed, std::string bos_token, std::string eos_token,
               Clock clock);

  std::shared_ptr<const Parsed> parsed_;
  std::string bos_token_;
  std::string eos_token_;
  Clock clock_;
  bool object_arguments_ = false;
  bool renders_tools_ = false;
  bool renders_tool_calls_ = false;
};

// The Jinja file of a --chat_template flag (kvserve-worker, kvserve-router), read and checked to
// parse. INVALID_ARGUMENT naming the flag and the file when it cannot be read, is empty or does
// not parse.
absl::StatusOr<std::string> ReadChatTemplateFile(const std::string& path);

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_CHAT_TEMPLATE_H_
