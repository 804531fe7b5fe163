// RenderPrompt: the one rule that turns text or chat input into the token ids a request runs
// on. The worker and the router both call it, so the router hashes exactly the blocks the worker
// will cache (prefix-aware routing depends on that):
//   chat: rendered with the model's chat template (add_generation_prompt, default on), then
//         encoded with special tokens off unless add_special_tokens says otherwise (the template
//         already writes them); a template that refuses the conversation (raise_exception)
//         makes it INVALID_ARGUMENT "chat: <its message>", one that fails on a message
//         "chat.messages[i]: chat template failed: ..."; a template that ignores tools or tool
//         calls gets them through the fallback of tool_prompt_fallback.h;
//   text: encoded with the model's BOS when add_special_tokens (default on) and the tokenizer
//         adds one by default.
//
// Thread-safety: a pure function of its arguments.
#ifndef KVSERVE_TOKENIZER_PROMPT_H_
#define KVSERVE_TOKENIZER_PROMPT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

struct RenderedPrompt {
  std::vector<int32_t> token_ids;
  std::string rendered_chat;  // the chat template's text; empty for text input
};

// Text input: `text` non-null and `chat` null; chat input: `chat` non-null (with its template
// in `chat_template`, shown `tools`: ChatTemplate::Render's). REQUIRES: exactly one of text /
// chat; chat_template non-null with chat.
absl::StatusOr<RenderedPrompt> RenderPrompt(
    const Tokenizer& tokenizer, const ChatTemplate* chat_template, const std::string* text,
    const std::vector<ChatMessage>* chat, std::optional<bool> add_special_tokens,
    std::optional<bool> add_generation_prompt, absl::Span<const std::string> tools = {});

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_PROMPT_H_
