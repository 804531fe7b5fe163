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
