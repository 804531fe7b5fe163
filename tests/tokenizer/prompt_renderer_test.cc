// Tests of PromptRenderer, the prompt front that the worker and the router share: every kind of
// input becomes the token ids a worker computes (the router hashes them to find cached
// prefixes), Tokenize and Detokenize answer from the same tokenizer, bad input is refused naming
// the field (a chat the template refuses too), a renderer without a tokenizer takes token ids
// only, and --chat_template replaces the model's template. Uses the default model's tokenizer; a
// missing model fails the test.
#include "tokenizer/prompt_renderer.h"

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/default_model.h"
#include "tests/status_matchers.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kText[] = "The capital of France is";

PromptInput TextInput(std::string text) {
  PromptInput input;
  input.text = std::move(text);
  return input;
}

PromptInput ChatInput() {
  PromptInput input;
  input.chat = std::vector<ChatMessage>{{"user", "What is 2+2?"}};
  return input;
}

class PromptRendererTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<PromptRenderer>> renderer =
        PromptRenderer::Load(DefaultModelPath());
    KVSERVE_ASSERT_OK(renderer) << "run scripts/setup.sh for the default model";
    renderer_ = *std::move(renderer);
  }
  std::unique_ptr<PromptRenderer> renderer_;
};

TEST_F(PromptRendererTest, TextTokenIdsAndTokenizeAgree) {
  absl::StatusOr<std::vector<int32_t>> ids = renderer_->Render(TextInput(kText));
  KVSERVE_ASSERT_OK(ids);
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(renderer_->tokenizer()->Decode(*ids, /*skip_special=*/true), kText);

  absl::StatusOr<TokenizedPrompt> tokenized =
      renderer_->Tokenize(TextInput(kText), /*with_token_bytes=*/false);
  KVSERVE_ASSERT_OK(tokenized);
  EXPECT_EQ(tokenized->token_ids, *ids);
  EXPECT_TRUE(tokenized->token_bytes.empty());
  EXPECT_EQ(tokenized->rendered_prompt, "");

  PromptInput by_ids;
  by_ids.token_ids = *ids;
  EXPECT_EQ(*renderer_->Render(by_ids), *ids);
}

TEST_F(PromptRendererTest, ChatIsRenderedWithTheTemplateAndAnAssistantHeader) {
  ASSERT_NE(renderer_->chat_template(), nullptr);
  absl::StatusOr<TokenizedPrompt> tokenized =
      renderer_->Tokenize(ChatInput(), /*with_token_bytes=*/false);
  KVSERVE_ASSERT_OK(tokenized);
  EXPECT_THAT(tokenized->rendered_prompt, HasSubstr("<|im_start|>user\nWhat is 2+2?<|im_end|>"));
  EXPECT_THAT(tokenized->rendered_prompt, EndsWith("<|im_start|>assistant\n"));

  absl::StatusOr<std::vector<int32_t>> ids = renderer_->Render(ChatInput());
  KVSERVE_ASSERT_OK(ids);
  EXPECT_EQ(*ids, tokenized->token_ids);

  PromptInput without_header = ChatInput();
  without_header.add_generation_prompt = false;
  absl::StatusOr<TokenizedPrompt> plain = renderer_->Tokenize(without_header, false);
  KVSERVE_ASSERT_OK(plain);
  EXPECT_THAT(plain->rendered_prompt, ::testing::Not(EndsWith("<|im_start|>assistant\n")));
}

TEST_F(PromptRendererTest, TokenBytesAreOnePerIdAndSpellTheText) {
  absl::StatusOr<TokenizedPrompt> tokenized =
      renderer_->Tokenize(TextInput(kText), /*with_token_bytes=*/true);
  KVSERVE_ASSERT_OK(tokenized);
  ASSERT_EQ(tokenized->token_bytes.size(), tokenized->token_ids.size());
  std::string joined;
  for (const std::string& bytes : tokenized->token_bytes) joined += bytes;
  EXPECT_EQ(joined, *renderer_->Detokenize(tokenized->token_ids, /*skip_special=*/false));
}

TEST_F(PromptRendererTest, DetokenizeLeavesOutSpecialTokensWhenAsked) {
  absl::StatusOr<std::vector<int32_t>> ids = renderer_->Render(ChatInput());
  KVSERVE_ASSERT_OK(ids);
  absl::StatusOr<std::string> with_special = renderer_->Detokenize(*ids, /*skip_special=*/false);
  absl::StatusOr<std::string> without = renderer_->Detokenize(*ids, /*skip_special=*/true);
  KVSERVE_ASSERT_OK(with_special);
  KVSERVE_ASSERT_OK(without);
  EXPECT_THAT(*with_special, HasSubstr("<|im_start|>"));
  EXPECT_THAT(*without, ::testing::Not(HasSubstr("<|im_start|>")));
}

TEST_F(PromptRendererTest, MissingInputIsRefusedNamingTheField) {
  // Everything else about a bad request (ids outside the vocabulary, empty chat, bad roles) is
  // refused before rendering by api/request_validation.h (tests/api/request_validation_test.cc).
  EXPECT_THAT(renderer_->Render(PromptInput()),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("input:")));
  EXPECT_THAT(renderer_->Tokenize(PromptInput(), false),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("input:")));
}

TEST(PromptRendererBorrowedTest, RendersExactlyAsTheLoadedRenderer) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<std::unique_ptr<PromptRenderer>> loaded = PromptRenderer::Load(DefaultModelPath());
  KVSERVE_ASSERT_OK(loaded);
  const PromptRenderer borrowed(tokenizer.get());
  EXPECT_EQ(borrowed.tokenizer(), tokenizer.get());
  ASSERT_NE(borrowed.chat_template(), nullptr);
  EXPECT_EQ(*borrowed.Render(TextInput(kText)), *(*loaded)->Render(TextInput(kText)));
  EXPECT_EQ(*borrowed.Render(ChatInput()), *(*loaded)->Render(ChatInput()));
}

TEST(PromptRendererWithoutTokenizerTest, TakesTokenIdsOnly) {
  const PromptRenderer renderer(nullptr);
  EXPECT_EQ(renderer.tokenizer(), nullptr);
  EXPECT_EQ(renderer.chat_template(), nullptr);
  PromptInput by_ids;
  by_ids.token_ids = std::vector<int32_t>{5, 6, 7};
  EXPECT_EQ(*renderer.Render(by_ids), (std::vector<int32_t>{5, 6, 7}));
  EXPECT_THAT(renderer.Render(TextInput(kText)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "input: the served model has no tokenizer; send prompt_token_ids"));
  EXPECT_THAT(renderer.Tokenize(ChatInput(), false),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("input:")));
  EXPECT_THAT(renderer.Detokenize(std::vector<int32_t>{5}, true),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(PromptRendererWithoutTemplateTest, ChatIsRefusedNamingTheField) {
  // The SentencePiece fixture has no chat template.
  std::unique_ptr<Tokenizer> tokenizer = testing::HfFixtureTokenizer("tokenizer_spm");
  ASSERT_NE(tokenizer, nullptr);
  ASSERT_TRUE(tokenizer->chat_template().empty());
  const PromptRenderer renderer(tokenizer.get());
  EXPECT_EQ(renderer.chat_template(), nullptr);
  EXPECT_THAT(renderer.Render(ChatInput()),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("chat:")));
  KVSERVE_EXPECT_OK(renderer.Render(TextInput(kText)));
}

TEST(PromptRendererTemplateTest, AConversationTheTemplateRefusesIsRefusedNamingTheField) {
  // A template may refuse what it cannot render (Gemma's: "System role not supported"); that is
  // the client's error.
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  tokenizer->SetChatTemplate(
      "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{{ messages[0].content }}");
  const PromptRenderer renderer(tokenizer.get());
  PromptInput input;
  input.chat = std::vector<ChatMessage>{{"system", "be brief"}, {"user", "hi"}};
  EXPECT_THAT(renderer.Render(input),
              StatusIs(absl::StatusCode::kInvalidArgument, "chat: System role not supported"));
  KVSERVE_EXPECT_OK(renderer.Render(ChatInput()));
}

TEST(PromptRendererLoadTest, ChatTemplateFileReplacesTheModelsTemplate) {
  const std::string path = ::testing::TempDir() + "/plain.jinja";
  std::ofstream(path) << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
  absl::StatusOr<std::unique_ptr<PromptRenderer>> renderer =
      PromptRenderer::Load(DefaultModelPath(), path);
  KVSERVE_ASSERT_OK(renderer);
  EXPECT_EQ((*renderer)->tokenizer()->chat_template(),
            "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}");
  absl::StatusOr<TokenizedPrompt> tokenized = (*renderer)->Tokenize(ChatInput(), false);
  KVSERVE_ASSERT_OK(tokenized);
  EXPECT_EQ(tokenized->rendered_prompt, "user: What is 2+2?\n");
}

TEST(PromptRendererLoadTest, BadChatTemplateFileNamesTheFlag) {
  EXPECT_THAT(PromptRenderer::Load(DefaultModelPath(), "/nonexistent/template.jinja"),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("--chat_template: ")));
  const std::string path = ::testing::TempDir() + "/broken.jinja";
  std::ofstream(path) << "{% for m in messages %}";
  EXPECT_THAT(PromptRenderer::Load(DefaultModelPath(), path),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(StartsWith("--chat_template: "), HasSubstr("does not parse"))));
}

TEST(PromptRendererLoadTest, MissingModelNamesTheFlag) {
  EXPECT_THAT(PromptRenderer::Load("/nonexistent/model.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("--model:")));
}

TEST(PromptRendererLoadTest, SyntheticModelHasNoTokenizer) {
  EXPECT_THAT(
      PromptRenderer::Load("synthetic:tiny"),
      StatusIs(absl::StatusCode::kInvalidArgument, "--model: a synthetic model has no tokenizer"));
}

}  // namespace
}  // namespace kvserve
