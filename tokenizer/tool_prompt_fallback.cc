#include "tokenizer/tool_prompt_fallback.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvserve {

std::string FallbackToolSystemPrompt(absl::Span<const std::string> tools) {
  std::string text =
      "You have access to the functions listed below. Each is described by one JSON object on "
      "its own line, inside <tools></tools>:\n<tools>\n";
  for (const std::string& tool : tools) absl::StrAppend(&text, tool, "\n");
  absl::StrAppend(&text,
                  "</tools>\n\nWhen a function would help, call it. Write each call on its own, "
                  "as a JSON object with the function's \"name\" and its \"arguments\" object, "
                  "inside <tool_call></tool_call>:\n<tool_call>\n{\"name\": \"function_name\", "
                  "\"arguments\": {\"argument\": \"value\"}}\n</tool_call>\nThe results come "
                  "back in messages of role tool; use them to answer.");
  return text;
}

std::string FallbackToolCallText(const ChatToolCall& call) {
  // The arguments are validated JSON text; kept as written (a non-object would be refused
  // before rendering).
  return absl::StrCat("<tool_call>\n{\"name\": ", nlohmann::json(call.name).dump(),
                      ", \"arguments\": ", call.arguments.empty() ? "{}" : call.arguments,
                      "}\n</tool_call>");
}

std::vector<ChatMessage> WithFallbackToolPrompt(absl::Span<const ChatMessage> messages,
                                                absl::Span<const std::string> tools,
                                                bool inject_tools, bool inline_tool_calls) {
  std::vector<ChatMessage> out(messages.begin(), messages.end());
  if (inline_tool_calls) {
    for (ChatMessage& message : out) {
      if (message.tool_calls.empty()) continue;
      std::string content = message.content.value_or("");
      for (const ChatToolCall& call : message.tool_calls) {
        absl::StrAppend(&content, content.empty() ? "" : "\n", FallbackToolCallText(call));
      }
      message.content = std::move(content);
      message.tool_calls.clear();  // shown as text now; a template that refuses them is spared
    }
  }
  if (inject_tools && !tools.empty()) {
    const std::string prompt = FallbackToolSystemPrompt(tools);
    if (!out.empty() && out[0].role == "system") {
      const std::string system = out[0].content.value_or("");
      out[0].content = system.empty() ? prompt : absl::StrCat(system, "\n\n", prompt);
    } else {
      out.insert(out.begin(), ChatMessage{.role = "system", .content = prompt});
    }
  }
  return out;
}

}  // namespace kvserve
