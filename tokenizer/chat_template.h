// ChatTemplate: turns chat messages into the prompt text a model was trained on. Not a jinja
// engine: the format is recognised from markers in the model's jinja chat_template, then
// rendered by hand.
//   kChatMl  "<|im_start|>{role}\n{content}<|im_end|>\n" per message; the generation prompt is
//            "<|im_start|>assistant\n". When the template writes a literal system message for
//            conversations that do not start with one (SmolLM2, Qwen2), that default system
//            prompt is injected the same way.
//   kLlama3  "<|begin_of_text|>" then "<|start_header_id|>{role}<|end_header_id|>\n\n
//            {content, trimmed}<|eot_id|>" per message; the generation prompt is the assistant
//            header.
// The rendered text holds special-token text; Tokenizer::Encode turns it into their single ids.
//
// Thread-safety: immutable value; Render may run concurrently.
#ifndef KVSERVE_TOKENIZER_CHAT_TEMPLATE_H_
#define KVSERVE_TOKENIZER_CHAT_TEMPLATE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvserve {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

enum class ChatFormat { kChatMl, kLlama3 };

class ChatTemplate {
 public:
  // Recognises the format of a jinja chat template. INVALID_ARGUMENT when it is empty or none of
  // the supported formats; UNIMPLEMENTED for a recognised family with parts we do not render
  // (Llama 3.1's date / tools header).
  static absl::StatusOr<ChatTemplate> FromJinja(std::string_view jinja_source);

  // A ChatML template; `default_system_prompt` empty = none injected.
  static ChatTemplate ChatMl(std::string default_system_prompt);
  static ChatTemplate Llama3();

  // The prompt for `messages`, ending with the assistant's header when add_generation_prompt.
  std::string Render(absl::Span<const ChatMessage> messages, bool add_generation_prompt) const;

  ChatFormat format() const { return format_; }
  const std::string& default_system_prompt() const { return default_system_prompt_; }

 private:
  ChatTemplate(ChatFormat format, std::string default_system_prompt)
      : format_(format), default_system_prompt_(std::move(default_system_prompt)) {}

  ChatFormat format_;
  std::string default_system_prompt_;
};

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_CHAT_TEMPLATE_H_
