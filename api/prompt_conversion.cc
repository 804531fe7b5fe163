#include "api/prompt_conversion.h"

#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvserve {
namespace {

// Content as the client gave it, "" included; unset is none (OpenAI's null) on a turn of tool
// calls, "" on any other.
ChatMessage ChatMessageOf(const v1::ChatMessage& message) {
  ChatMessage out{message.role(), message.content()};
  if (!message.has_content() && message.tool_calls_size() > 0) out.content.reset();
  for (const v1::ChatToolCall& call : message.tool_calls()) {
    out.tool_calls.push_back(
        {call.id(), call.name(), call.arguments().empty() ? "{}" : call.arguments()});
  }
  out.tool_call_id = message.tool_call_id();
  out.name = message.name();
  return out;
}

// The OpenAI tool object a template expects: {"type": "function", "function": {"name",
// "description" (when given), "parameters" (when given)}}. REQUIRES: parameters is empty or an
// object's JSON text (CheckChat).
std::string ToolJson(const v1::ChatTool& tool) {
  nlohmann::ordered_json function = {{"name", tool.name()}};
  if (!tool.description().empty()) function["description"] = tool.description();
  if (!tool.parameters().empty()) {
    function["parameters"] = nlohmann::ordered_json::parse(tool.parameters(), nullptr, false);
  }
  return nlohmann::ordered_json({{"type", "function"}, {"function", function}}).dump();
}

// GenerateRequest and TokenizeRequest name their text and chat fields alike.
template <typename Request>
PromptInput TextOrChatInputOf(const Request& request) {
  PromptInput input;
  if (request.has_prompt()) input.text = request.prompt();
  if (request.has_chat()) {
    std::vector<ChatMessage>& messages = input.chat.emplace();
    messages.reserve(request.chat().messages_size());
    for (const v1::ChatMessage& message : request.chat().messages()) {
      messages.push_back(ChatMessageOf(message));
    }
    for (const v1::ChatTool& tool : request.chat().tools()) input.tools.push_back(ToolJson(tool));
  }
  if (request.has_add_special_tokens()) input.add_special_tokens = request.add_special_tokens();
  if (request.has_add_generation_prompt()) {
    input.add_generation_prompt = request.add_generation_prompt();
  }
  return input;
}

}  // namespace

PromptInput PromptInputOf(const v1::GenerateRequest& request) {
  PromptInput input = TextOrChatInputOf(request);
  if (request.has_prompt_token_ids()) {
    const auto& ids = request.prompt_token_ids().ids();
    input.token_ids.emplace(ids.begin(), ids.end());
  }
  return input;
}

PromptInput PromptInputOf(const v1::TokenizeRequest& request) { return TextOrChatInputOf(request); }

v1::TokenizeResponse ToTokenizeResponse(TokenizedPrompt tokenized) {
  v1::TokenizeResponse response;
  response.mutable_token_ids()->Add(tokenized.token_ids.begin(), tokenized.token_ids.end());
  for (std::string& bytes : tokenized.token_bytes) response.add_token_bytes(std::move(bytes));
  response.set_rendered_prompt(std::move(tokenized.rendered_prompt));
  return response;
}

}  // namespace kvserve
