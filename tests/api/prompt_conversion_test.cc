// Tests of the API's prompt conversion (api/prompt_conversion.h), which the router and the worker
// share: requests become the renderer's input and the renderer's answer a TokenizeResponse, so
// that the router turns every kind of input into the token ids a worker would compute (the router
// hashes them to find cached prefixes). The renderer itself is tested in
// tests/tokenizer/prompt_renderer_test.cc. Uses the default model's tokenizer; a missing model
// fails the test.
#include "api/prompt_conversion.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/default_model.h"
#include "tests/status_matchers.h"
#include "tokenizer/prompt_renderer.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;

namespace v1 = kvserve::v1;

class RouterPromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = DefaultModelPath();
    ASSERT_TRUE(std::filesystem::exists(path))
        << "default model not found at " << path << " (run scripts/setup.sh)";
    absl::StatusOr<std::unique_ptr<PromptRenderer>> renderer = PromptRenderer::Load(path);
    KVSERVE_ASSERT_OK(renderer);
    renderer_ = *std::move(renderer);
  }

  absl::StatusOr<std::vector<int32_t>> Render(const v1::GenerateRequest& request) const {
    return renderer_->Render(PromptInputOf(request));
  }
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request) const {
    absl::StatusOr<TokenizedPrompt> tokenized =
        renderer_->Tokenize(PromptInputOf(request), request.return_token_bytes());
    if (!tokenized.ok()) return tokenized.status();
    return ToTokenizeResponse(*std::move(tokenized));
  }

  std::unique_ptr<PromptRenderer> renderer_;
};

TEST_F(RouterPromptTest, TextTokenIdsAndTokenizeAgree) {
  v1::GenerateRequest by_text;
  by_text.set_prompt("The capital of France is");
  absl::StatusOr<std::vector<int32_t>> ids = Render(by_text);
  KVSERVE_ASSERT_OK(ids);
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(renderer_->tokenizer()->Decode(*ids, /*skip_special=*/true),
            "The capital of France is");

  v1::TokenizeRequest tokenize;
  tokenize.set_prompt("The capital of France is");
  tokenize.set_return_token_bytes(true);
  absl::StatusOr<v1::TokenizeResponse> tokenized = Tokenize(tokenize);
  KVSERVE_ASSERT_OK(tokenized);
  EXPECT_EQ(std::vector<int32_t>(tokenized->token_ids().begin(), tokenized->token_ids().end()),
            *ids);
  EXPECT_EQ(tokenized->token_bytes_size(), tokenized->token_ids_size());
  EXPECT_EQ(tokenized->rendered_prompt(), "");

  v1::GenerateRequest by_ids;
  by_ids.mutable_prompt_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  EXPECT_EQ(*Render(by_ids), *ids);
}

TEST_F(RouterPromptTest, ChatIsRenderedWithTheTemplateAndAnAssistantHeader) {
  v1::TokenizeRequest request;
  v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("What is 2+2?");
  absl::StatusOr<v1::TokenizeResponse> tokenized = Tokenize(request);
  KVSERVE_ASSERT_OK(tokenized);
  EXPECT_NE(tokenized->rendered_prompt().find("<|im_start|>user\nWhat is 2+2?<|im_end|>"),
            std::string::npos);
  const std::string header = "<|im_start|>assistant\n";
  ASSERT_GE(tokenized->rendered_prompt().size(), header.size());
  EXPECT_EQ(
      tokenized->rendered_prompt().substr(tokenized->rendered_prompt().size() - header.size()),
      header);

  v1::GenerateRequest generate;
  *generate.mutable_chat() = request.chat();
  absl::StatusOr<std::vector<int32_t>> ids = Render(generate);
  KVSERVE_ASSERT_OK(ids);
  EXPECT_EQ(*ids,
            std::vector<int32_t>(tokenized->token_ids().begin(), tokenized->token_ids().end()));
}

TEST_F(RouterPromptTest, RequestOptionsReachTheRenderer) {
  v1::GenerateRequest request;
  request.mutable_chat()->add_messages()->set_role("user");
  request.set_add_special_tokens(true);
  request.set_add_generation_prompt(false);
  const PromptInput input = PromptInputOf(request);
  ASSERT_TRUE(input.chat.has_value());
  EXPECT_EQ(input.chat->size(), 1u);
  EXPECT_FALSE(input.text.has_value());
  EXPECT_FALSE(input.token_ids.has_value());
  EXPECT_EQ(input.add_special_tokens, std::optional<bool>(true));
  EXPECT_EQ(input.add_generation_prompt, std::optional<bool>(false));

  const PromptInput unset = PromptInputOf(v1::GenerateRequest());
  EXPECT_FALSE(unset.add_special_tokens.has_value());
  EXPECT_FALSE(unset.add_generation_prompt.has_value());
}

// Tools, an assistant's tool calls (content none) and a tool result reach the template: with
// Qwen 2.5's template (--chat_template) they render as its <tools>, <tool_call> and
// <tool_response> sections.
TEST_F(RouterPromptTest, ToolsToolCallsAndToolResultsReachTheTemplate) {
  v1::TokenizeRequest request;
  v1::ChatConversation* chat = request.mutable_chat();
  v1::ChatMessage* user = chat->add_messages();
  user->set_role("user");
  user->set_content("Weather in Paris?");
  v1::ChatMessage* assistant = chat->add_messages();
  assistant->set_role("assistant");
  v1::ChatToolCall* call = assistant->add_tool_calls();
  call->set_id("call_1");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Paris"})");
  v1::ChatMessage* result = chat->add_messages();
  result->set_role("tool");
  result->set_tool_call_id("call_1");
  result->set_content("18 C, cloudy");
  v1::ChatTool* tool = chat->add_tools();
  tool->set_name("get_weather");
  tool->set_description("Current weather of a city");
  tool->set_parameters(R"({"type": "object", "properties": {"city": {"type": "string"}}})");

  const PromptInput input = PromptInputOf(request);
  ASSERT_TRUE(input.chat.has_value());
  ASSERT_EQ(input.chat->size(), 3u);
  EXPECT_FALSE((*input.chat)[1].content.has_value());  // OpenAI's null
  ASSERT_EQ((*input.chat)[1].tool_calls.size(), 1u);
  EXPECT_EQ((*input.chat)[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ((*input.chat)[2].tool_call_id, "call_1");
  ASSERT_EQ(input.tools.size(), 1u);
  EXPECT_EQ(input.tools[0],
            R"({"type":"function","function":{"name":"get_weather","description":"Current )"
            R"(weather of a city","parameters":{"type":"object","properties":{"city":{"type":)"
            R"("string"}}}}})");

  absl::StatusOr<std::unique_ptr<PromptRenderer>> qwen = PromptRenderer::Load(
      DefaultModelPath(),
      std::string(KVSERVE_SOURCE_DIR) +
          "/tests/tokenizer/testdata/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  KVSERVE_ASSERT_OK(qwen);
  absl::StatusOr<TokenizedPrompt> tokenized = (*qwen)->Tokenize(input, false);
  KVSERVE_ASSERT_OK(tokenized);
  const std::string& prompt = tokenized->rendered_prompt;
  EXPECT_NE(
      prompt.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""),
      std::string::npos)
      << prompt;
  EXPECT_NE(
      prompt.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
      std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<tool_response>\n18 C, cloudy\n</tool_response>"), std::string::npos)
      << prompt;
}

// What SDKs send back for an assistant turn of tool calls: content "" reaches the template as
// "", null (unset) as none, as transformers passes them; a turn without calls is "" unset.
TEST_F(RouterPromptTest, EmptyContentStaysEmptyAndUnsetIsNoneOnlyBesideToolCalls) {
  v1::GenerateRequest request;
  v1::ChatConversation* chat = request.mutable_chat();
  v1::ChatMessage* user = chat->add_messages();
  user->set_role("user");
  v1::ChatMessage* empty = chat->add_messages();
  empty->set_role("assistant");
  empty->set_content("");
  empty->add_tool_calls()->set_name("get_weather");
  v1::ChatMessage* unset = chat->add_messages();
  unset->set_role("assistant");
  unset->add_tool_calls()->set_name("get_weather");
  const PromptInput input = PromptInputOf(request);
  ASSERT_EQ(input.chat->size(), 3u);
  EXPECT_EQ((*input.chat)[0].content, std::optional<std::string>(""));
  EXPECT_EQ((*input.chat)[1].content, std::optional<std::string>(""));
  EXPECT_EQ((*input.chat)[2].content, std::nullopt);
  // The default model's template concatenates content: "" renders, as transformers does.
  chat->mutable_messages()->DeleteSubrange(2, 1);
  user->set_content("Weather in Paris?");
  KVSERVE_EXPECT_OK(Render(request));
}

TEST_F(RouterPromptTest, MissingInputIsRefusedNamingTheField) {
  // Everything else about a bad request (ids outside the vocabulary, empty chat, bad roles) is
  // refused before rendering by api/request_validation.h, exactly as on a worker
  // (tests/api/request_validation_test.cc, tests/e2e/router_validation_e2e_test.py).
  v1::GenerateRequest none;
  EXPECT_THAT(Render(none), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Render(none).status().message().substr(0, 6), "input:");
}

}  // namespace
}  // namespace kvserve
