// IncrementalDetokenizer: streamed deltas never end inside a UTF-8 character, and all deltas plus
// Flush() equal Tokenizer::Decode of the whole sequence, for byte-level and SentencePiece
// tokenizers alike.
#include "tokenizer/detokenizer.h"

#include <iostream>
#include <random>

#include "gtest/gtest.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

// True when `text` is complete, well-formed UTF-8.
bool IsValidUtf8(const std::string& text) {
  std::string repaired;
  return AppendValidUtf8(text, true, &repaired) == text.size() && repaired == text;
}

// Streams `ids` and checks every delta and the concatenation.
void ExpectStreamsLikeDecode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                             bool skip_special, const std::string& what) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string delta = detokenizer.Push(id);
    EXPECT_TRUE(IsValidUtf8(delta)) << what << " delta " << testing::Quoted(delta);
    EXPECT_LE(detokenizer.pending_bytes(), 3u) << what;
    streamed += delta;
  }
  streamed += detokenizer.Flush();
  EXPECT_EQ(streamed, tokenizer.Decode(ids, skip_special)) << what;
}

TEST(DetokenizerTest, ByteLevelStreamEqualsDecode) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  for (const testing::IdCase& c : testing::ReadIdCases("tokenizer_bytelevel_smollm.jsonl")) {
    for (bool skip_special : {false, true}) {
      ExpectStreamsLikeDecode(*tokenizer, c.ids, skip_special, testing::Quoted(c.text));
    }
  }
}

TEST(DetokenizerTest, HoldsBackSplitCharacter) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  // "😀" as its four byte-level byte tokens, one at a time.
  std::vector<int32_t> ids;
  for (uint8_t byte : std::string("\xF0\x9F\x98\x80")) {
    ids.push_back(tokenizer->PieceToId(ByteLevelPiece(byte)));
    ASSERT_GE(ids.back(), 0);
  }
  IncrementalDetokenizer detokenizer(*tokenizer, false);
  EXPECT_EQ(detokenizer.Push(ids[0]), "");
  EXPECT_EQ(detokenizer.Push(ids[1]), "");
  EXPECT_EQ(detokenizer.Push(ids[2]), "");
  EXPECT_EQ(detokenizer.pending_bytes(), 3u);
  EXPECT_EQ(detokenizer.Push(ids[3]), "😀");
  EXPECT_EQ(detokenizer.Flush(), "");
  // A character cut short at the end becomes U+FFFD on Flush, as in Decode.
  IncrementalDetokenizer cut(*tokenizer, false);
  EXPECT_EQ(cut.Push(ids[0]), "");
  EXPECT_EQ(cut.Push(ids[1]), "");
  EXPECT_EQ(cut.Flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer->Decode({ids[0], ids[1]}), "\xEF\xBF\xBD");
}

TEST(DetokenizerTest, SentencePieceStreamEqualsDecodeAndDropsLeadingSpaceOnce) {
  for (std::string name : {"tokenizer_spm", "tokenizer_spm_metaspace"}) {
    std::unique_ptr<Tokenizer> tokenizer = testing::HfFixtureTokenizer(name);
    ASSERT_NE(tokenizer, nullptr);
    for (const testing::IdCase& c : testing::ReadIdCases(name + ".jsonl")) {
      for (bool skip_special : {false, true}) {
        ExpectStreamsLikeDecode(*tokenizer, c.ids, skip_special,
                                name + " " + testing::Quoted(c.text));
      }
    }
  }
  std::unique_ptr<Tokenizer> tokenizer = testing::HfFixtureTokenizer("tokenizer_spm");
  ASSERT_NE(tokenizer, nullptr);
  // "▁hello▁world": the first token's space is dropped, the second's kept.
  const std::vector<int32_t> ids = tokenizer->Encode("hello world", /*add_bos=*/true);
  IncrementalDetokenizer detokenizer(*tokenizer, /*skip_special=*/true);
  std::string text;
  for (int32_t id : ids) text += detokenizer.Push(id);
  EXPECT_EQ(text + detokenizer.Flush(), "hello world");
}

// Any id sequence, including ones that spell broken UTF-8, streams to the same text as Decode.
TEST(DetokenizerTest, RandomIdSequencesStreamLikeDecode) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  std::unique_ptr<Tokenizer> byte_level = testing::DefaultModelTokenizer();
  std::unique_ptr<Tokenizer> sentencepiece = testing::HfFixtureTokenizer("tokenizer_spm");
  ASSERT_NE(byte_level, nullptr);
  ASSERT_NE(sentencepiece, nullptr);
  for (const Tokenizer* tokenizer : {byte_level.get(), sentencepiece.get()}) {
    for (int round = 0; round < 300; ++round) {
      std::vector<int32_t> ids(rng() % 12);
      for (int32_t& id : ids) {
        // Mostly byte tokens (SentencePiece <0xXX> are ids 3-258; byte-level bytes are < 300).
        id = static_cast<int32_t>(rng() % 3 == 0 ? rng() % tokenizer->vocab_size() : rng() % 300);
      }
      ExpectStreamsLikeDecode(*tokenizer, ids, rng() % 2 == 0,
                              "seed " + std::to_string(seed) + " round " + std::to_string(round));
    }
  }
}

}  // namespace
}  // namespace kvserve
