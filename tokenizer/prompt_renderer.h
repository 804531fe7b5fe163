// PromptRenderer: a served model's tokenizer and chat template behind the calls that the worker
// and the router both answer from them: a request's input (text, chat or token ids) as the token
// ids it runs on, Tokenize (with each token's bytes) and Detokenize. The router hashes the blocks
// of the ids it gets here before choosing a worker, so both must render through this one class
// (RenderPrompt, tokenizer/prompt.h, holds the rule itself).
//
// Input comes as plain values (PromptInput); the transports convert their messages to it. A
// renderer without a tokenizer (a worker serving a synthetic model) takes token-id input only.
//
// Thread-safety: immutable after construction; safe to share.
#ifndef KVSERVE_TOKENIZER_PROMPT_RENDERER_H_
#define KVSERVE_TOKENIZER_PROMPT_RENDERER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// A request's prompt. Exactly one of text / chat / token_ids should be set; request validation
// (api/request_validation.h) refuses the rest before rendering.
struct PromptInput {
  std::optional<std::string> text;
  std::optional<std::vector<ChatMessage>> chat;
  std::vector<std::string> tools;  // chat only: ChatTemplate::Render's tools (JSON texts)
  std::optional<std::vector<int32_t>> token_ids;  // used as given
  std::optional<bool> add_special_tokens;         // unset: on for text, off for chat
  std::optional<bool> add_generation_prompt;      // chat only; unset: on
};

// What Tokenize answers.
struct TokenizedPrompt {
  std::vector<int32_t> token_ids;
  std::vector<std::string> token_bytes;  // one entry per id when asked for, else empty
  std::string rendered_prompt;           // the chat template's text; empty for text input
};

class PromptRenderer {
 public:
  // Loads only the tokenizer of `model_path` (GGUF metadata, or tokenizer.json of a Hugging Face
  // directory), never the weights, and owns it. `chat_template_path` non-empty: that Jinja file
  // replaces the model's chat template (--chat_template). INVALID_ARGUMENT "--model: ..." when
  // the model has no usable tokenizer (a synthetic model has none); "--chat_template: ..." as
  // ReadChatTemplateFile.
  static absl::StatusOr<std::unique_ptr<PromptRenderer>> Load(
      const std::string& model_path, const std::string& chat_template_path = "");

  // Borrows `tokenizer`, which must outlive the renderer; null: token-id input only.
  explicit PromptRenderer(const Tokenizer* tokenizer);

  PromptRenderer(const PromptRenderer&) = delete;
  PromptRenderer& operator=(const PromptRenderer&) = delete;

  // `input` as token ids; token ids are returned as given (ValidatePromptTokens checks them).
  // INVALID_ARGUMENT "input: ..." when no input is set, or text / chat reach a renderer without
  // a tokenizer; "chat: ..." for chat when the model has no chat template (or one that does not
  // parse) and when the template refuses the conversation (RenderPrompt).
  absl::StatusOr<std::vector<int32_t>> Render(PromptInput input) const;

  // Text or chat input as token ids, the chat template's text and, when `with_token_bytes`, the
  // bytes each token contributes (special tokens included). Errors as Render's.
  absl::StatusOr<TokenizedPrompt> Tokenize(const PromptInput& input, bool with_token_bytes) const;

  // The text of `ids`; special tokens left out when `skip_special`. FAILED_PRECONDITION without
  // a tokenizer. REQUIRES: every id is in the vocabulary (ValidateDetokenizeRequest).
  absl::StatusOr<std::string> Detokenize(absl::Span<const int32_t> ids, bool skip_special) const;

  // Null when there is none.
  const Tokenizer* tokenizer() const { return tokenizer_; }
  // Null when the model has no chat template, or one that does not parse.
  const ChatTemplate* chat_template() const {
    return chat_template_.ok() ? &*chat_template_ : nullptr;
  }

 private:
  explicit PromptRenderer(std::unique_ptr<Tokenizer> tokenizer);

  // RenderPrompt for text or chat input, with the errors above.
  absl::StatusOr<RenderedPrompt> RenderTextOrChat(const PromptInput& input) const;

  std::unique_ptr<Tokenizer> owned_tokenizer_;  // set by Load only
  const Tokenizer* const tokenizer_;
  absl::StatusOr<ChatTemplate> chat_template_;  // the error says why chat is refused
};

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_PROMPT_RENDERER_H_
