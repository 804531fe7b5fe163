// PromptRenderer: the router's copy of the model's tokenizer and chat template, so it can hash a
// prompt's blocks before choosing a worker, and answer Tokenize / Detokenize itself. It loads only
// the tokenizer from the model file (GGUF metadata, or tokenizer.json of a Hugging Face
// directory), never the weights, and renders input exactly as the workers do: chat through the
// template (special tokens off by default), text with the model's BOS when add_special_tokens
// (default on), token ids as given.
//
// Thread-safety: immutable after Load; safe to share.
#ifndef KVSERVE_ROUTER_PROMPT_RENDERER_H_
#define KVSERVE_ROUTER_PROMPT_RENDERER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvserve/v1/generation.pb.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

class PromptRenderer {
 public:
  // INVALID_ARGUMENT "--model: ..." when the file has no usable tokenizer.
  static absl::StatusOr<std::unique_ptr<PromptRenderer>> Load(const std::string& model_path);

  // The prompt of a GenerateRequest as token ids (RenderPrompt, tokenizer/prompt.h).
  // REQUIRES: the request passed ValidateGenerateRequest (api/request_validation.h), which
  // refuses a missing input, bad roles and chat without a template; token ids are returned as
  // given, for ValidatePromptTokens.
  absl::StatusOr<std::vector<int32_t>> Render(const kvserve::v1::GenerateRequest& request) const;

  // REQUIRES: the request passed ValidateTokenizeRequest / ValidateDetokenizeRequest.
  absl::StatusOr<kvserve::v1::TokenizeResponse> Tokenize(
      const kvserve::v1::TokenizeRequest& request) const;
  absl::StatusOr<kvserve::v1::DetokenizeResponse> Detokenize(
      const kvserve::v1::DetokenizeRequest& request) const;

  const Tokenizer& tokenizer() const { return *tokenizer_; }

 private:
  PromptRenderer(std::unique_ptr<Tokenizer> tokenizer, std::optional<ChatTemplate> chat)
      : tokenizer_(std::move(tokenizer)), chat_template_(std::move(chat)) {}

  // RenderPrompt. Exactly one of `prompt` / `chat` is non-null.
  absl::StatusOr<RenderedPrompt> RenderText(const std::string* prompt,
                                            const kvserve::v1::ChatConversation* chat,
                                            std::optional<bool> add_special_tokens,
                                            std::optional<bool> add_generation_prompt) const;

  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_PROMPT_RENDERER_H_
