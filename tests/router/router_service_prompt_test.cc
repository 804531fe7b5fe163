// Tests of PromptRenderer, the router's tokenizer front: it must turn every kind of input into
// the token ids a worker would compute (the router hashes them to find cached prefixes), and
// refuse bad input naming the field. Uses the default model's tokenizer; skipped without it.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/default_model.h"
#include "router/prompt_renderer.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

class PromptRendererTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = DefaultModelPath();
    ASSERT_TRUE(std::filesystem::exists(path))
        << "default model not found at " << path << " (run scripts/setup.sh)";
    absl::StatusOr<std::unique_ptr<PromptRenderer>> renderer = PromptRenderer::Load(path);
    ASSERT_TRUE(renderer.ok()) << renderer.status();
    renderer_ = *std::move(renderer);
  }
  std::unique_ptr<PromptRenderer> renderer_;
};

TEST_F(PromptRendererTest, TextTokenIdsAndTokenizeAgree) {
  v1::GenerateRequest by_text;
  by_text.set_prompt("The capital of France is");
  absl::StatusOr<std::vector<int32_t>> ids = renderer_->Render(by_text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(renderer_->tokenizer().Decode(*ids, /*skip_special=*/true), "The capital of France is");

  v1::TokenizeRequest tokenize;
  tokenize.set_prompt("The capital of France is");
  absl::StatusOr<v1::TokenizeResponse> tokenized = renderer_->Tokenize(tokenize);
  ASSERT_TRUE(tokenized.ok());
  EXPECT_EQ(std::vector<int32_t>(tokenized->token_ids().begin(), tokenized->token_ids().end()),
            *ids);

  v1::GenerateRequest by_ids;
  by_ids.mutable_prompt_token_ids()->mutable_ids()->Add(ids->begin(), ids->end());
  EXPECT_EQ(*renderer_->Render(by_ids), *ids);
}

TEST_F(PromptRendererTest, ChatIsRenderedWithTheTemplateAndAnAssistantHeader) {
  v1::TokenizeRequest request;
  v1::ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("What is 2+2?");
  absl::StatusOr<v1::TokenizeResponse> tokenized = renderer_->Tokenize(request);
  ASSERT_TRUE(tokenized.ok()) << tokenized.status();
  EXPECT_NE(tokenized->rendered_prompt().find("<|im_start|>user\nWhat is 2+2?<|im_end|>"),
            std::string::npos);
  const std::string header = "<|im_start|>assistant\n";
  ASSERT_GE(tokenized->rendered_prompt().size(), header.size());
  EXPECT_EQ(
      tokenized->rendered_prompt().substr(tokenized->rendered_prompt().size() - header.size()),
      header);

  v1::GenerateRequest generate;
  *generate.mutable_chat() = request.chat();
  absl::StatusOr<std::vector<int32_t>> ids = renderer_->Render(generate);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids,
            std::vector<int32_t>(tokenized->token_ids().begin(), tokenized->token_ids().end()));
}

TEST_F(PromptRendererTest, MissingInputIsRefusedNamingTheField) {
  // Everything else about a bad request (ids outside the vocabulary, empty chat, bad roles) is
  // refused before rendering by api/request_validation.h, exactly as on a worker
  // (tests/api/request_validation_test.cc, tests/e2e/router_validation_e2e_test.py).
  v1::GenerateRequest none;
  EXPECT_EQ(renderer_->Render(none).status().message().substr(0, 6), "input:");
}

TEST(PromptRendererLoadTest, MissingModelNamesTheFlag) {
  absl::StatusOr<std::unique_ptr<PromptRenderer>> renderer =
      PromptRenderer::Load("/nonexistent/model.gguf");
  EXPECT_EQ(renderer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(renderer.status().message().substr(0, 8), "--model:");
}

}  // namespace
}  // namespace kvserve
