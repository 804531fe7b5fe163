// ChoiceState: text deltas from tokens (ASCII tokenizer: token id = byte), stop strings held back
// and cut, stop tokens, max_tokens and the context window, and the replay of a migrated choice.
#include "engine/choice_state.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/engine_test_util.h"

namespace kvserve {
namespace {

class ChoiceStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::MakeAsciiTokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    rules_.max_tokens = 100;
    rules_.max_context_len = 1000;
  }

  std::unique_ptr<ChoiceState> Make(const ChoiceStart& start = testing::Choice(0)) {
    return std::make_unique<ChoiceState>(start, &sampling_, &rules_, /*num_prompt_tokens=*/5,
                                         tokenizer_.get());
  }

  // Feeds the bytes of `text` as tokens; returns the outputs, one per token.
  static std::vector<ChoiceOutput> Feed(ChoiceState& choice, const std::string& text,
                                        bool* finished = nullptr) {
    std::vector<ChoiceOutput> outputs;
    for (char c : text) {
      SampledToken token;
      token.token = static_cast<unsigned char>(c);
      absl::Duration latency;
      const bool done = choice.OnToken(token, absl::Now(), &latency);
      outputs.push_back(*choice.TakeOutput());
      if (finished != nullptr) *finished = done;
      if (done) break;
    }
    return outputs;
  }

  static std::string Text(const std::vector<ChoiceOutput>& outputs) {
    std::string text;
    for (const ChoiceOutput& out : outputs) text += out.text;
    return text;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  SamplingOptions sampling_;
  StopRules rules_;
};

TEST_F(ChoiceStateTest, TextFollowsTokensOneByOne) {
  auto choice = Make();
  auto outputs = Feed(*choice, "hello");
  ASSERT_EQ(outputs.size(), 5u);
  EXPECT_EQ(outputs[0].text, "h");
  EXPECT_EQ(outputs[0].token_ids, std::vector<int32_t>{'h'});
  EXPECT_EQ(Text(outputs), "hello");
  EXPECT_FALSE(choice->finished());
}

TEST_F(ChoiceStateTest, PossibleStopPrefixIsHeldBackUntilDecided) {
  sampling_.stop = {"<end>"};
  auto choice = Make();
  auto outputs = Feed(*choice, "ab<en");
  EXPECT_EQ(outputs[2].text, "");  // "<" held back
  EXPECT_EQ(Text(outputs), "ab");
  outputs = Feed(*choice, "x");
  EXPECT_EQ(Text(outputs), "<enx");  // decided: not a stop string
  bool finished = false;
  outputs = Feed(*choice, "y<end>zzz", &finished);
  EXPECT_TRUE(finished);
  EXPECT_EQ(Text(outputs), "y");
  EXPECT_EQ(outputs.back().finish_reason, FinishReason::kStopString);
  EXPECT_EQ(outputs.back().stop_string, "<end>");
  EXPECT_EQ(outputs.size(), 6u);  // stopped at the token that completed "<end>"
}

TEST_F(ChoiceStateTest, StopTokenEndsTheChoiceWithoutItsText) {
  rules_.stop_token_ids = {'!'};
  auto choice = Make();
  bool finished = false;
  auto outputs = Feed(*choice, "hi!more", &finished);
  EXPECT_TRUE(finished);
  EXPECT_EQ(Text(outputs), "hi");
  EXPECT_EQ(outputs.back().token_ids, std::vector<int32_t>{'!'});
  EXPECT_EQ(outputs.back().finish_reason, FinishReason::kStop);
  EXPECT_EQ(outputs.back().stop_token_id, '!');
  sampling_.include_stop_str_in_output = true;
  auto with_text = Make();
  EXPECT_EQ(Text(Feed(*with_text, "hi!more")), "hi!");
}

TEST_F(ChoiceStateTest, LengthLimitFlushesHeldText) {
  rules_.max_tokens = 4;
  sampling_.stop = {"xyz"};
  auto choice = Make();
  bool finished = false;
  auto outputs = Feed(*choice, "abxy", &finished);
  EXPECT_TRUE(finished);
  EXPECT_EQ(Text(outputs), "abxy");  // "xy" was held, then flushed at the end
  EXPECT_EQ(outputs.back().finish_reason, FinishReason::kLength);
  rules_.max_tokens = 100;
  rules_.max_context_len = 8;  // 5 prompt tokens + 3
  auto short_context = Make();
  EXPECT_EQ(Feed(*short_context, "abcdef").size(), 3u);
}

TEST_F(ChoiceStateTest, MigratedChoiceSkipsTheTextAlreadySent) {
  sampling_.stop = {"STOP"};
  rules_.max_tokens = 12;
  // Before the migration: "abcST" generated, "abc" sent ("ST" held back as a possible stop).
  auto before = Make();
  EXPECT_EQ(Text(Feed(*before, "abcST")), "abc");
  std::vector<int32_t> generated = {'a', 'b', 'c', 'S', 'T'};
  auto after = Make(testing::Choice(0, generated, 3));
  EXPECT_FALSE(after->TakeOutput().has_value());  // nothing new to send yet
  auto outputs = Feed(*after, "ART!");
  EXPECT_EQ(Text(outputs), "START!");
  EXPECT_EQ(after->num_new_tokens(), 4);
  EXPECT_EQ(after->generated().size(), 9u);
}

}  // namespace
}  // namespace kvserve
