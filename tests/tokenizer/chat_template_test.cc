// Chat templates rendered by hand against the real jinja templates rendered by jinja2
// (fixtures/tokenizer_chat_*.jsonl, written by make_tokenizer_fixtures.py).
#include "tokenizer/chat_template.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<ChatMessage> Messages(const nlohmann::json& row) {
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& m : row["messages"]) {
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

void ExpectRendersLikeJinja(const ChatTemplate& chat, const std::vector<nlohmann::json>& rows) {
  ASSERT_FALSE(rows.empty());
  for (const nlohmann::json& row : rows) {
    const bool add_generation_prompt = row["add_generation_prompt"].get<bool>();
    EXPECT_EQ(chat.Render(Messages(row), add_generation_prompt), row["text"].get<std::string>())
        << row.dump();
  }
}

TEST(ChatTemplateTest, DefaultModelTemplateMatchesJinja) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(tokenizer->chat_template());
  KVSERVE_ASSERT_OK(chat);
  EXPECT_EQ(chat->format(), ChatFormat::kChatMl);
  EXPECT_EQ(chat->default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  ExpectRendersLikeJinja(*chat, testing::ReadJsonLines("tokenizer_chat_smollm2.jsonl"));
}

TEST(ChatTemplateTest, Llama3TemplateMatchesJinja) {
  std::vector<nlohmann::json> rows = testing::ReadJsonLines("tokenizer_chat_llama3.jsonl");
  ASSERT_GE(rows.size(), 2u);
  absl::StatusOr<ChatTemplate> chat =
      ChatTemplate::FromJinja(rows[0]["template"].get<std::string>());
  KVSERVE_ASSERT_OK(chat);
  EXPECT_EQ(chat->format(), ChatFormat::kLlama3);
  rows.erase(rows.begin());
  ExpectRendersLikeJinja(*chat, rows);
}

TEST(ChatTemplateTest, ChatMlWithoutLiteralSystemPromptInjectsNone) {
  // A ChatML template whose system block comes from the messages only.
  const std::string jinja =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}";
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(jinja);
  KVSERVE_ASSERT_OK(chat);
  EXPECT_EQ(chat->default_system_prompt(), "");
  EXPECT_EQ(chat->Render({{"user", "hi"}}, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // Escaped newlines and quotes in a literal default prompt (Qwen2 style) are unescaped.
  absl::StatusOr<ChatTemplate> qwen = ChatTemplate::FromJinja(
      "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou\\'re helpful."
      "<|im_end|>\\n' }}{% endif %}{% for message in messages %}{{'<|im_start|>' + "
      "message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}{% endfor %}");
  KVSERVE_ASSERT_OK(qwen);
  EXPECT_EQ(qwen->default_system_prompt(), "You're helpful.");
}

TEST(ChatTemplateTest, UnknownTemplatesAreRefused) {
  EXPECT_THAT(ChatTemplate::FromJinja(""), StatusIs(absl::StatusCode::kInvalidArgument));
  const absl::Status unknown = ChatTemplate::FromJinja("[INST] {{ content }} [/INST]").status();
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("unrecognised chat template")));
  EXPECT_THAT(ChatTemplate::FromJinja("<|start_header_id|>system<|end_header_id|>\n\n"
                                      "Cutting Knowledge Date: December 2023"),
              StatusIs(absl::StatusCode::kUnimplemented));
}

// The rendered prompt's special-token text becomes single ids when encoded.
TEST(ChatTemplateTest, RenderedPromptEncodesMarkersAsSpecialIds) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::string prompt = ChatTemplate::ChatMl("").Render({{"user", "Hi"}}, true);
  const std::vector<int32_t> ids = tokenizer->Encode(prompt, false);
  const int32_t im_start = tokenizer->PieceToId("<|im_start|>");
  const int32_t im_end = tokenizer->PieceToId("<|im_end|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 1);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(tokenizer->Decode(ids), prompt);
}

}  // namespace
}  // namespace kvserve
