// VocabularyFromTokenizer: each token id's bytes as the grammar engine needs them.
#include <string>
#include <vector>

#include "grammar/vocabulary.h"
#include "gtest/gtest.h"
#include "tests/grammar/grammar_test_util.h"
#include "tests/status_matchers.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(VocabularyTest, ByteLevelTokensBecomeTheirBytesAndControlTokensNone) {
  const grammar_test::ModelVocabulary* model = grammar_test::DefaultModelVocabulary();
  ASSERT_NE(model, nullptr);
  const Tokenizer& tokenizer = *model->tokenizer;
  const GrammarVocabulary& vocabulary = model->vocabulary;
  ASSERT_EQ(vocabulary.token_bytes.size(), static_cast<size_t>(tokenizer.vocab_size()));
  EXPECT_EQ(vocabulary.vocab_size, 49152);
  EXPECT_EQ(vocabulary.token_bytes[tokenizer.PieceToId("{")], "{");
  EXPECT_EQ(vocabulary.token_bytes[tokenizer.PieceToId("Ġhello")], " hello");
  EXPECT_EQ(vocabulary.token_bytes[tokenizer.PieceToId("Ċ")], "\n");
  const int32_t im_start = tokenizer.PieceToId("<|im_start|>");
  ASSERT_GE(im_start, 0);
  EXPECT_EQ(vocabulary.token_bytes[im_start], "");
  EXPECT_EQ(vocabulary.token_bytes[tokenizer.eos_id()], "");
  // Every id's bytes are those Decode writes for it alone.
  for (int32_t id : {100, 1000, 20000, 49151}) {
    EXPECT_EQ(vocabulary.token_bytes[id], tokenizer.Decode({id})) << id;
  }
}

TEST(VocabularyTest, SentencePieceSpacesAndByteTokensBecomeBytes) {
  TokenizerSpec spec;
  spec.type = TokenizerType::kSentencePieceBpe;
  spec.pieces = {"<unk>", "<s>", "</s>", "▁a", "b", "<0x0A>", "<unused0>"};
  spec.kinds = {TokenKind::kUnknown, TokenKind::kControl, TokenKind::kControl, TokenKind::kNormal,
                TokenKind::kNormal,  TokenKind::kByte,    TokenKind::kUnused};
  spec.scores = {0, 0, 0, -1, -2, 0, 0};
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromSpec(spec);
  KVSERVE_ASSERT_OK(tokenizer);
  absl::StatusOr<GrammarVocabulary> vocabulary = VocabularyFromTokenizer(**tokenizer, 8, {2});
  KVSERVE_ASSERT_OK(vocabulary);
  EXPECT_EQ(vocabulary->token_bytes, (std::vector<std::string>{"", "", "", " a", "b", "\n", ""}));
  EXPECT_EQ(vocabulary->vocab_size, 8);
  EXPECT_EQ(vocabulary->stop_token_ids, std::vector<int32_t>{2});
}

TEST(VocabularyTest, RejectsAVocabSizeBelowTheTokenizerAndStopIdsOutside) {
  const grammar_test::ModelVocabulary* model = grammar_test::DefaultModelVocabulary();
  ASSERT_NE(model, nullptr);
  EXPECT_THAT(VocabularyFromTokenizer(*model->tokenizer, 1000, {2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab_size 1000")));
  EXPECT_THAT(VocabularyFromTokenizer(*model->tokenizer, 49152, {49152}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stop token id 49152")));
}

}  // namespace
}  // namespace kvserve
