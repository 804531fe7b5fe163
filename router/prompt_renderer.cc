#include "router/prompt_renderer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

template <typename T>
std::optional<bool> OptionalBool(bool has, T value) {
  return has ? std::optional<bool>(value) : std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PromptRenderer>> PromptRenderer::Load(
    const std::string& model_path) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromModelPath(model_path);
  if (tokenizer.ok() && *tokenizer == nullptr) {
    return absl::InvalidArgumentError("--model: a synthetic model has no tokenizer");
  }
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--model: ", tokenizer.status().message()));
  }
  std::optional<ChatTemplate> chat;
  if (!(*tokenizer)->chat_template().empty()) {
    absl::StatusOr<ChatTemplate> parsed = ChatTemplate::FromJinja((*tokenizer)->chat_template());
    if (parsed.ok()) chat = *std::move(parsed);
  }
  return std::unique_ptr<PromptRenderer>(
      new PromptRenderer(*std::move(tokenizer), std::move(chat)));
}

absl::StatusOr<RenderedPrompt> PromptRenderer::RenderText(
    const std::string* prompt, const kvserve::v1::ChatConversation* chat,
    std::optional<bool> add_special_tokens, std::optional<bool> add_generation_prompt) const {
  std::vector<ChatMessage> messages;
  if (chat != nullptr) {
    for (const kvserve::v1::ChatMessage& message : chat->messages()) {
      messages.push_back({message.role(), message.content()});
    }
  }
  return RenderPrompt(*tokenizer_, chat_template_ ? &*chat_template_ : nullptr, prompt,
                      chat != nullptr ? &messages : nullptr, add_special_tokens,
                      add_generation_prompt);
}

absl::StatusOr<std::vector<int32_t>> PromptRenderer::Render(
    const kvserve::v1::GenerateRequest& request) const {
  using Input = kvserve::v1::GenerateRequest;
  switch (request.input_case()) {
    case Input::kPromptTokenIds: {
      const auto& ids = request.prompt_token_ids().ids();
      return std::vector<int32_t>(ids.begin(), ids.end());
    }
    case Input::kPrompt:
    case Input::kChat: {
      KVSERVE_ASSIGN_OR_RETURN(
          RenderedPrompt rendered,
          RenderText(
              request.has_prompt() ? &request.prompt() : nullptr,
              request.has_chat() ? &request.chat() : nullptr,
              OptionalBool(request.has_add_special_tokens(), request.add_special_tokens()),
              OptionalBool(request.has_add_generation_prompt(), request.add_generation_prompt())));
      return std::move(rendered.token_ids);
    }
    case Input::INPUT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "input: exactly one of prompt, prompt_token_ids and chat must be set");
}

absl::StatusOr<kvserve::v1::TokenizeResponse> PromptRenderer::Tokenize(
    const kvserve::v1::TokenizeRequest& request) const {
  KVSERVE_ASSIGN_OR_RETURN(
      RenderedPrompt rendered,
      RenderText(
          request.has_prompt() ? &request.prompt() : nullptr,
          request.has_chat() ? &request.chat() : nullptr,
          OptionalBool(request.has_add_special_tokens(), request.add_special_tokens()),
          OptionalBool(request.has_add_generation_prompt(), request.add_generation_prompt())));
  kvserve::v1::TokenizeResponse response;
  response.mutable_token_ids()->Add(rendered.token_ids.begin(), rendered.token_ids.end());
  if (request.return_token_bytes()) {
    for (int32_t id : rendered.token_ids) {
      std::string bytes;
      tokenizer_->AppendTokenBytes(id, /*skip_special=*/false, &bytes);
      response.add_token_bytes(std::move(bytes));
    }
  }
  response.set_rendered_prompt(std::move(rendered.rendered_chat));
  return response;
}

absl::StatusOr<kvserve::v1::DetokenizeResponse> PromptRenderer::Detokenize(
    const kvserve::v1::DetokenizeRequest& request) const {
  const std::vector<int32_t> ids(request.token_ids().begin(), request.token_ids().end());
  kvserve::v1::DetokenizeResponse response;
  response.set_text(tokenizer_->Decode(ids, !request.detokenize_special_tokens()));
  return response;
}

}  // namespace kvserve
