#include "tokenizer/prompt_renderer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

// The text of a special token (its piece); "" when the vocabulary has none.
std::string SpecialTokenText(const Tokenizer& tokenizer, int32_t id) {
  return id >= 0 ? tokenizer.IdToPiece(id) : "";
}

// The model's chat template, parsed, with the model's BOS and EOS text.
absl::StatusOr<ChatTemplate> ChatTemplateOf(const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("the model has no tokenizer");
  return ChatTemplate::FromJinja(tokenizer->chat_template(),
                                 SpecialTokenText(*tokenizer, tokenizer->bos_id()),
                                 SpecialTokenText(*tokenizer, tokenizer->eos_id()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PromptRenderer>> PromptRenderer::Load(
    const std::string& model_path, const std::string& chat_template_path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromModelPath(model_path);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model: ", tokenizer.status().message()));
  }
  if (*tokenizer == nullptr) {
    return absl::InvalidArgumentError("--model: a synthetic model has no tokenizer");
  }
  if (!chat_template_path.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(std::string jinja, ReadChatTemplateFile(chat_template_path));
    (*tokenizer)->SetChatTemplate(std::move(jinja));
  }
  return std::unique_ptr<PromptRenderer>(new PromptRenderer(*std::move(tokenizer)));
}

PromptRenderer::PromptRenderer(const Tokenizer* tokenizer)
    : tokenizer_(tokenizer), chat_template_(ChatTemplateOf(tokenizer)) {}

PromptRenderer::PromptRenderer(std::unique_ptr<Tokenizer> tokenizer)
    : owned_tokenizer_(std::move(tokenizer)),
      tokenizer_(owned_tokenizer_.get()),
      chat_template_(ChatTemplateOf(tokenizer_)) {}

absl::StatusOr<RenderedPrompt> PromptRenderer::RenderTextOrChat(const PromptInput& input) const {
  if (!input.text.has_value() && !input.chat.has_value()) {
    return absl::InvalidArgumentError(
        "input: exactly one of prompt, prompt_token_ids and chat must be set");
  }
  if (tokenizer_ == nullptr) {
    return absl::InvalidArgumentError(
        "input: the served model has no tokenizer; send prompt_token_ids");
  }
  if (input.chat.has_value() && !chat_template_.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat: ", chat_template_.status().message(), "; send prompt or token ids"));
  }
  return RenderPrompt(*tokenizer_, chat_template(), input.text.has_value() ? &*input.text : nullptr,
                      input.chat.has_value() ? &*input.chat : nullptr, input.add_special_tokens,
                      input.add_generation_prompt, input.tools);
}

absl::StatusOr<std::vector<int32_t>> PromptRenderer::Render(PromptInput input) const {
  if (input.token_ids.has_value()) return *std::move(input.token_ids);
  KVSERVE_ASSIGN_OR_RETURN(RenderedPrompt rendered, RenderTextOrChat(input));
  return std::move(rendered.token_ids);
}

absl::StatusOr<TokenizedPrompt> PromptRenderer::Tokenize(const PromptInput& input,
                                                         bool with_token_bytes) const {
  KVSERVE_ASSIGN_OR_RETURN(RenderedPrompt rendered, RenderTextOrChat(input));
  TokenizedPrompt tokenized;
  if (with_token_bytes) {
    tokenized.token_bytes.reserve(rendered.token_ids.size());
    for (int32_t id : rendered.token_ids) {
      tokenizer_->AppendTokenBytes(id, /*skip_special=*/false,
                                   &tokenized.token_bytes.emplace_back());
    }
  }
  tokenized.token_ids = std::move(rendered.token_ids);
  tokenized.rendered_prompt = std::move(rendered.rendered_chat);
  return tokenized;
}

absl::StatusOr<std::string> PromptRenderer::Detokenize(absl::Span<const int32_t> ids,
                                                       bool skip_special) const {
  if (tokenizer_ == nullptr) {
    return absl::FailedPreconditionError("the served model has no tokenizer");
  }
  return tokenizer_->Decode(ids, skip_special);
}

}  // namespace kvserve
