#include "tokenizer/chat_template.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";

// Unescapes the jinja string-literal escapes a template may use (\n, \t, \', \", \\).
std::string UnescapeLiteral(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out.push_back(text[i]);
      continue;
    }
    const char c = text[++i];
    out.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
  }
  return out;
}

// The literal system prompt a ChatML template writes when the conversation has none: the text of
// a string literal "<|im_start|>system\n...<|im_end|>". Empty when there is no such literal (the
// system block takes the message content instead).
std::string FindDefaultSystemPrompt(std::string_view jinja) {
  const std::string marker = std::string(kImStart) + "system";
  for (size_t at = jinja.find(marker); at != std::string_view::npos;
       at = jinja.find(marker, at + 1)) {
    std::string_view rest = jinja.substr(at + marker.size());
    if (rest.starts_with("\n")) {
      rest.remove_prefix(1);
    } else if (rest.starts_with("\\n")) {
      rest.remove_prefix(2);
    } else {
      continue;
    }
    // The literal must reach <|im_end|> without closing (an unescaped quote); otherwise the
    // system content comes from the messages.
    size_t end = 0;
    while (end < rest.size() && !rest.substr(end).starts_with(kImEnd) && rest[end] != '\'' &&
           rest[end] != '"') {
      end += rest[end] == '\\' ? 2 : 1;
    }
    if (end < rest.size() && rest.substr(end).starts_with(kImEnd)) {
      return UnescapeLiteral(rest.substr(0, end));
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<ChatTemplate> ChatTemplate::FromJinja(std::string_view jinja) {
  if (jinja.empty()) return absl::InvalidArgumentError("the model has no chat template");
  const auto contains = [&](std::string_view part) {
    return jinja.find(part) != std::string_view::npos;
  };
  if (contains(kImStart) && contains(kImEnd)) {
    return ChatMl(FindDefaultSystemPrompt(jinja));
  }
  if (contains("<|start_header_id|>")) {
    if (contains("Cutting Knowledge Date") || contains("tools")) {
      return absl::UnimplementedError(
          "Llama 3.1+ chat template (date / tools header) is not supported; Llama 3 is");
    }
    return Llama3();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unrecognised chat template (supported: ChatML, Llama 3); it begins: ",
                   std::string(jinja.substr(0, 120))));
}

ChatTemplate ChatTemplate::ChatMl(std::string default_system_prompt) {
  return ChatTemplate(ChatFormat::kChatMl, std::move(default_system_prompt));
}

ChatTemplate ChatTemplate::Llama3() { return ChatTemplate(ChatFormat::kLlama3, ""); }

std::string ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  std::string out;
  if (format_ == ChatFormat::kChatMl) {
    const auto append = [&](std::string_view role, std::string_view content) {
      out.append(kImStart).append(role).append("\n").append(content).append(kImEnd).append("\n");
    };
    if (!default_system_prompt_.empty() && !messages.empty() && messages[0].role != "system") {
      append("system", default_system_prompt_);
    }
    for (const ChatMessage& message : messages) append(message.role, message.content);
    if (add_generation_prompt) out.append(kImStart).append("assistant\n");
    return out;
  }
  out = "<|begin_of_text|>";
  for (const ChatMessage& message : messages) {
    absl::StrAppend(&out, "<|start_header_id|>", message.role, "<|end_header_id|>\n\n",
                    absl::StripAsciiWhitespace(message.content), "<|eot_id|>");
  }
  if (add_generation_prompt)
    absl::StrAppend(&out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
  return out;
}

}  // namespace kvserve
