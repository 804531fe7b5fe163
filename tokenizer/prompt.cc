#include "tokenizer/prompt.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<RenderedPrompt> RenderPrompt(
    const Tokenizer& tokenizer, const ChatTemplate* chat_template, const std::string* text,
    const std::vector<ChatMessage>* chat, std::optional<bool> add_special_tokens,
    std::optional<bool> add_generation_prompt, absl::Span<const std::string> tools) {
  RenderedPrompt rendered;
  if (chat != nullptr) {
    absl::StatusOr<std::string> chat_text =
        chat_template->Render(*chat, add_generation_prompt.value_or(true), tools,
                              /*tool_fallback=*/true);
    if (!chat_text.ok()) {
      // The template's errors name a message or a tool of the conversation when they can.
      const absl::string_view message = chat_text.status().message();
      const bool names_a_field =
          absl::StartsWith(message, "messages[") || absl::StartsWith(message, "tools[");
      return absl::Status(chat_text.status().code(),
                          absl::StrCat(names_a_field ? "chat." : "chat: ", message));
    }
    rendered.rendered_chat = *std::move(chat_text);
  }
  const bool special = add_special_tokens.value_or(chat == nullptr);
  const std::string& input = chat != nullptr ? rendered.rendered_chat : *text;
  rendered.token_ids = tokenizer.Encode(input, special && tokenizer.add_bos_by_default());
  return rendered;
}

}  // namespace kvserve
