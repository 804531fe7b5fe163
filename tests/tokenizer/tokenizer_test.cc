// Tokenizer from the default model's GGUF (SmolLM2, byte-level BPE, "smollm" regime) against ids
// from Hugging Face `tokenizers` (fixtures/tokenizer_bytelevel_*.jsonl).
#include "tokenizer/tokenizer.h"

#include <chrono>
#include <iostream>
#include <random>

#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

using testing::DefaultModelTokenizer;
using testing::IdCase;
using testing::Quoted;
using testing::ReadIdCases;

void ExpectMatchesFixture(const Tokenizer& tokenizer, const std::vector<IdCase>& cases) {
  ASSERT_FALSE(cases.empty());
  for (const IdCase& c : cases) {
    EXPECT_EQ(tokenizer.Encode(c.text, /*add_bos=*/false), c.ids) << "text " << Quoted(c.text);
    EXPECT_EQ(tokenizer.Decode(c.ids), c.text) << "text " << Quoted(c.text);
    EXPECT_EQ(c.decoded, c.text);  // the reference round-trips too
  }
}

TEST(TokenizerGgufTest, DefaultModelIdsMatchHuggingFace) {
  std::unique_ptr<Tokenizer> tokenizer = DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  ExpectMatchesFixture(*tokenizer, ReadIdCases("tokenizer_bytelevel_smollm.jsonl"));
}

// The Llama 3 and Qwen2 split rules, run over the default model's vocabulary, against the
// reference regex engine's splits.
TEST(TokenizerGgufTest, Llama3AndQwen2RegimesMatchHuggingFace) {
  std::unique_ptr<GgufFile> gguf = testing::OpenDefaultModel();
  ASSERT_NE(gguf, nullptr);
  for (auto [regime, fixture] :
       {std::pair{PreTokenizerRegime::kLlama3, "tokenizer_bytelevel_llama-bpe.jsonl"},
        std::pair{PreTokenizerRegime::kQwen2, "tokenizer_bytelevel_qwen2.jsonl"}}) {
    SCOPED_TRACE(fixture);
    absl::StatusOr<TokenizerSpec> spec = Tokenizer::SpecFromGguf(*gguf);
    KVSERVE_ASSERT_OK(spec);
    spec->regime = regime;
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromSpec(*std::move(spec));
    KVSERVE_ASSERT_OK(tokenizer);
    ExpectMatchesFixture(**tokenizer, ReadIdCases(fixture));
  }
}

TEST(TokenizerGgufTest, ReadsVocabularyAndSpecialIds) {
  std::unique_ptr<Tokenizer> tokenizer = DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->type(), TokenizerType::kByteLevelBpe);
  EXPECT_EQ(tokenizer->vocab_size(), 49152);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_EQ(tokenizer->unk_id(), 0);
  EXPECT_EQ(tokenizer->pad_id(), 2);
  EXPECT_FALSE(tokenizer->add_bos_by_default());
  EXPECT_EQ(tokenizer->IdToPiece(1), "<|im_start|>");
  EXPECT_EQ(tokenizer->PieceToId("<|im_end|>"), 2);
  EXPECT_EQ(tokenizer->Kind(2), TokenKind::kControl);
  EXPECT_EQ(tokenizer->IdToPiece(-1), "");
  EXPECT_EQ(tokenizer->IdToPiece(49152), "");
  EXPECT_NE(tokenizer->chat_template().find("<|im_start|>"), std::string::npos);
  // " hello" is spelled with the byte alphabet's stand-in for the space.
  const std::vector<int32_t> ids = tokenizer->Encode(" hello", false);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(tokenizer->IdToPiece(ids[0]), "\xC4\xA0hello");  // "Ġhello"
}

TEST(TokenizerGgufTest, SpecialTokensInTextBecomeSingleIds) {
  std::unique_ptr<Tokenizer> tokenizer = DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> ids = tokenizer->Encode("<|im_start|>user\nhi<|im_end|>", false);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  // A near miss is ordinary text.
  for (int32_t id : tokenizer->Encode("<|im_star|>", false)) EXPECT_GT(id, 16);
}

TEST(TokenizerGgufTest, AddsBosOnlyWhenAsked) {
  std::unique_ptr<Tokenizer> tokenizer = DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> plain = tokenizer->Encode("Hello", false);
  std::vector<int32_t> with_bos = tokenizer->Encode("Hello", true);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 1);
  with_bos.erase(with_bos.begin());
  EXPECT_EQ(with_bos, plain);
  EXPECT_TRUE(tokenizer->Encode("", false).empty());
}

TEST(TokenizerGgufTest, DecodeSkipsControlTokensWhenAsked) {
  std::unique_ptr<Tokenizer> tokenizer = DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> ids = tokenizer->Encode("<|im_start|>assistant\nOK<|im_end|>", false);
  EXPECT_EQ(tokenizer->Decode(ids, /*skip_special=*/false), "<|im_start|>assistant\nOK<|im_end|>");
  EXPECT_EQ(tokenizer->Decode(ids, /*skip_special=*/true), "assistant\nOK");
  EXPECT_EQ(tokenizer->Decode({-5, 1 << 30}), "");  // out-of-range ids are left out
}

// Any byte string survives encode + decode, except bytes the vocabulary has no token for (they
// are dropped, as Hugging Face drops them); invalid UTF-8 comes back repaired the way
// AppendValidUtf8 repairs it.
TEST(TokenizerGgufTest, ArbitraryBytesRoundTrip) {
  std::unique_ptr<Tokenizer> tokenizer = DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  for (int round = 0; round < 200; ++round) {
    std::string bytes(rng() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : 32 + rng() % 95);
    std::string representable;
    for (char c : bytes) {
      if (tokenizer->PieceToId(ByteLevelPiece(static_cast<uint8_t>(c))) >= 0) representable += c;
    }
    std::string repaired;
    AppendValidUtf8(representable, true, &repaired);
    EXPECT_EQ(tokenizer->Decode(tokenizer->Encode(bytes, false)), repaired)
        << "seed " << seed << " round " << round;
  }
}

// Encoding speed on the fixture texts repeated to ~1 MB (printed, not asserted).
TEST(TokenizerGgufTest, EncodeThroughput) {
  std::unique_ptr<Tokenizer> tokenizer = DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  std::string corpus;
  const std::vector<IdCase> cases = ReadIdCases("tokenizer_bytelevel_smollm.jsonl");
  while (corpus.size() < (1 << 20)) {
    for (const IdCase& c : cases) corpus += c.text + "\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tokenizer->Encode(corpus, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "encoded " << corpus.size() << " bytes into " << ids.size() << " tokens in "
            << seconds * 1e3 << " ms: " << corpus.size() / seconds / 1e6 << " MB/s\n";
  EXPECT_EQ(tokenizer->Decode(ids), corpus);
}

}  // namespace
}  // namespace kvserve
