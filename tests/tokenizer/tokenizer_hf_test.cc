// Tokenizer::FromHfJson on the committed tokenizer.json fixtures (a byte-level BPE with SmolLM2's
// pre-tokenizer, a Llama 2 style SentencePiece BPE with byte fallback), and the GGUF "llama"
// (score-merged SentencePiece) reader on a GGUF made in memory from the latter.
#include <algorithm>
#include <map>

#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "tests/model/gguf_test_writer.h"
#include "tests/status_matchers.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using testing::HfFixtureTokenizer;
using testing::IdCase;
using testing::Quoted;
using testing::ReadIdCases;

TEST(TokenizerHfJsonTest, ByteLevelIdsMatchHuggingFace) {
  std::unique_ptr<Tokenizer> tokenizer = HfFixtureTokenizer("tokenizer_bytelevel_small");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->type(), TokenizerType::kByteLevelBpe);
  const std::vector<IdCase> cases = ReadIdCases("tokenizer_bytelevel_small.jsonl");
  ASSERT_FALSE(cases.empty());
  for (const IdCase& c : cases) {
    EXPECT_EQ(tokenizer->Encode(c.text, false), c.ids) << Quoted(c.text);
    EXPECT_EQ(tokenizer->Decode(c.ids), c.text) << Quoted(c.text);
  }
}

TEST(TokenizerHfJsonTest, ReadsTokenizerConfig) {
  std::unique_ptr<Tokenizer> tokenizer = HfFixtureTokenizer("tokenizer_bytelevel_small");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), tokenizer->PieceToId("<|im_start|>"));
  EXPECT_EQ(tokenizer->eos_id(), tokenizer->PieceToId("<|im_end|>"));
  EXPECT_FALSE(tokenizer->add_bos_by_default());
  EXPECT_NE(tokenizer->chat_template().find("You are a helpful AI assistant named SmolLM"),
            std::string::npos);
  EXPECT_EQ(tokenizer->Kind(tokenizer->PieceToId("<|im_end|>")), TokenKind::kControl);
}

TEST(TokenizerHfJsonTest, SentencePieceIdsMatchHuggingFace) {
  std::unique_ptr<Tokenizer> tokenizer = HfFixtureTokenizer("tokenizer_spm");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->type(), TokenizerType::kSentencePieceBpe);
  EXPECT_TRUE(tokenizer->strips_leading_space());
  const std::vector<IdCase> cases = ReadIdCases("tokenizer_spm.jsonl");
  ASSERT_FALSE(cases.empty());
  for (const IdCase& c : cases) {
    EXPECT_EQ(tokenizer->Encode(c.text, false), c.ids) << Quoted(c.text);
    EXPECT_EQ(tokenizer->Decode(c.ids), c.decoded) << Quoted(c.text);
    // Decode inverts Encode, except that a special token leaves a "▁" after it (as in HF).
    if (c.text.find("<s>") == std::string::npos) {
      EXPECT_EQ(tokenizer->Decode(c.ids), c.text) << Quoted(c.text);
    }
  }
}

// The same model with a Metaspace pre-tokenizer ("▁" before the first segment only, and not
// when it already starts with a space; so the reference itself drops a leading space).
TEST(TokenizerHfJsonTest, MetaspaceIdsMatchHuggingFace) {
  std::unique_ptr<Tokenizer> tokenizer = HfFixtureTokenizer("tokenizer_spm_metaspace");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->type(), TokenizerType::kSentencePieceBpe);
  EXPECT_TRUE(tokenizer->strips_leading_space());
  const std::vector<IdCase> cases = ReadIdCases("tokenizer_spm_metaspace.jsonl");
  ASSERT_FALSE(cases.empty());
  for (const IdCase& c : cases) {
    EXPECT_EQ(tokenizer->Encode(c.text, false), c.ids) << Quoted(c.text);
    EXPECT_EQ(tokenizer->Decode(c.ids), c.decoded) << Quoted(c.text);
    if (!c.text.starts_with(' ')) {
      EXPECT_EQ(tokenizer->Decode(c.ids), c.text) << Quoted(c.text);
    }
  }
}

TEST(TokenizerHfJsonTest, SentencePieceSpellsSpacesAndFallsBackToBytes) {
  std::unique_ptr<Tokenizer> tokenizer = HfFixtureTokenizer("tokenizer_spm");
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_TRUE(tokenizer->add_bos_by_default());
  const std::vector<int32_t> ids = tokenizer->Encode("hello", /*add_bos=*/true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_TRUE(tokenizer->IdToPiece(ids[1]).starts_with("\xE2\x96\x81"));  // "▁" prefix
  // 😀 is not in the small vocabulary: four <0xXX> byte tokens.
  const std::vector<int32_t> emoji = tokenizer->Encode("😀", false);
  std::vector<std::string> pieces;
  for (int32_t id : emoji) pieces.push_back(tokenizer->IdToPiece(id));
  EXPECT_EQ(pieces,
            (std::vector<std::string>{"\xE2\x96\x81", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}));
  EXPECT_EQ(tokenizer->Decode(emoji), "😀");
  EXPECT_EQ(tokenizer->Decode(tokenizer->Encode("<s>x</s>", false), /*skip_special=*/true), "x");
}

// A GGUF "llama" tokenizer built from the SentencePiece fixture with scores instead of merges
// (score = minus the rank of the merge that makes the token): the score-ordered merge loop
// reaches the same tokens as the rank-ordered one on the fixture texts.
TEST(TokenizerGgufSentencePieceTest, ScoreMergesMatchRankMerges) {
  absl::StatusOr<TokenizerSpec> hf =
      Tokenizer::SpecFromHfJson(testing::TokenizerFixture("tokenizer_spm/tokenizer.json"));
  KVSERVE_ASSERT_OK(hf);
  std::vector<float> scores(hf->pieces.size(), 0.0f);
  std::map<std::string, size_t> rank_of_piece;
  for (size_t rank = 0; rank < hf->merges.size(); ++rank) {
    rank_of_piece.emplace(hf->merges[rank].first + hf->merges[rank].second, rank);
  }
  std::vector<int32_t> types;
  for (size_t id = 0; id < hf->pieces.size(); ++id) {
    auto it = rank_of_piece.find(hf->pieces[id]);
    scores[id] = it == rank_of_piece.end() ? 0.0f : -1.0f - static_cast<float>(it->second);
    const TokenKind kind = hf->kinds[id];
    types.push_back(kind == TokenKind::kByte      ? 6
                    : kind == TokenKind::kControl ? 3
                    : kind == TokenKind::kUnknown ? 2
                                                  : 1);
  }
  testing::GgufTestWriter writer;
  writer.AddString("general.architecture", "llama");
  writer.AddString("tokenizer.ggml.model", "llama");
  writer.AddStringArray("tokenizer.ggml.tokens", hf->pieces);
  writer.AddF32Array("tokenizer.ggml.scores", scores);
  writer.AddI32Array("tokenizer.ggml.token_type", types);
  writer.AddU32("tokenizer.ggml.bos_token_id", 1);
  writer.AddU32("tokenizer.ggml.eos_token_id", 2);
  writer.AddU32("tokenizer.ggml.unknown_token_id", 0);
  const std::string bytes = writer.Build();
  absl::StatusOr<std::unique_ptr<GgufFile>> gguf = GgufFile::Parse(bytes);
  KVSERVE_ASSERT_OK(gguf);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromGguf(**gguf);
  KVSERVE_ASSERT_OK(tokenizer);
  EXPECT_TRUE((*tokenizer)->add_bos_by_default());  // llama files default to BOS
  for (const IdCase& c : ReadIdCases("tokenizer_spm.jsonl")) {
    if (c.text.find("<s>") != std::string::npos) continue;  // HF prefixes every segment
    EXPECT_EQ((*tokenizer)->Encode(c.text, false), c.ids) << Quoted(c.text);
    EXPECT_EQ((*tokenizer)->Decode(c.ids), c.text) << Quoted(c.text);
  }
}

}  // namespace
}  // namespace kvserve
