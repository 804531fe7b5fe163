#include "tokenizer/prompt.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<RenderedPrompt> RenderPrompt(
    const Tokenizer& tokenizer, const ChatTemplate* chat_template, const std::string* text,
    const std::vector<ChatMessage>* chat, std::optional<bool> add_special_tokens,
    std::optional<bool> add_generation_prompt, absl::Span<const std::string> tools) {
  RenderedPrompt rendered;
  if (chat != nullptr) {
    absl::StatusOr<std::string> chat_text =
        chat_template->Render(*chat, add_generation_prompt.value_or(true), tools);
    if (!chat_text.ok()) {
      return absl::Status(chat_text.status().code(),
                          absl::StrCat("chat: ", chat_text.status().message()));
    }
    rendered.rendered_chat = *std::move(chat_text);
  }
  const bool special = add_special_tokens.value_or(chat == nullptr);
  const std::string& input = chat != nullptr ? rendered.rendered_chat : *text;
  rendered.token_ids = tokenizer.Encode(input, special && tokenizer.add_bos_by_default());
  return rendered;
}

}  // namespace kvserve
