// Tokenizers built from small hand-made specs: options that the fixtures do not reach
// (ignore_merges, Metaspace split), and malformed tokenizers refused with a status that names
// the problem, whichever reader they came through.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_file.h"
#include "tests/model/gguf_test_writer.h"
#include "tests/status_matchers.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::_;

// A valid byte-level spec: the 256 byte pieces, "ab" and one merge a + b.
TokenizerSpec SmallByteLevelSpec() {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.pieces.push_back(ByteLevelPiece(static_cast<uint8_t>(b)));
  spec.pieces.push_back("ab");
  spec.merges = {{"a", "b"}};
  return spec;
}

absl::Status SpecStatus(TokenizerSpec spec) {
  return Tokenizer::FromSpec(std::move(spec)).status();
}

TEST(TokenizerErrorsTest, SmallSpecIsValid) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::FromSpec(SmallByteLevelSpec());
  KVSERVE_ASSERT_OK(tokenizer);
  EXPECT_EQ((*tokenizer)->Encode("abc ab", false),
            (std::vector<int32_t>{256, 'c', (*tokenizer)->PieceToId("\xC4\xA0"), 256}));
}

TEST(TokenizerSpecTest, IgnoreMergesTakesWholeWordTokens) {
  TokenizerSpec spec = SmallByteLevelSpec();
  spec.pieces.push_back("abc");  // in the vocabulary, but no merge reaches it
  absl::StatusOr<std::unique_ptr<Tokenizer>> merging = Tokenizer::FromSpec(spec);
  KVSERVE_ASSERT_OK(merging);
  EXPECT_EQ((*merging)->Encode("abc", false), (std::vector<int32_t>{256, 'c'}));
  spec.ignore_merges = true;
  absl::StatusOr<std::unique_ptr<Tokenizer>> whole = Tokenizer::FromSpec(spec);
  KVSERVE_ASSERT_OK(whole);
  EXPECT_EQ((*whole)->Encode("abc", false), (std::vector<int32_t>{257}));
  EXPECT_EQ((*whole)->Encode("abcd", false), (std::vector<int32_t>{256, 'c', 'd'}));
}

// SentencePiece with Metaspace split: merges never cross a "▁" word start.
TEST(TokenizerSpecTest, SentencePieceSplitOnSpaceKeepsMergesInsideWords) {
  TokenizerSpec spec;
  spec.type = TokenizerType::kSentencePieceBpe;
  const std::string mark = "\xE2\x96\x81";  // "▁"
  spec.pieces = {"<unk>", mark, "a", "a" + mark, mark + "a"};
  spec.merges = {{"a", mark}, {mark, "a"}};
  spec.unk_id = 0;
  spec.space_prefix = SpacePrefix::kFirst;
  absl::StatusOr<std::unique_ptr<Tokenizer>> joined = Tokenizer::FromSpec(spec);
  KVSERVE_ASSERT_OK(joined);
  EXPECT_EQ((*joined)->Encode("a a", false), (std::vector<int32_t>{1, 3, 2}));  // ▁ a▁ a
  spec.split_on_space = true;
  absl::StatusOr<std::unique_ptr<Tokenizer>> split = Tokenizer::FromSpec(spec);
  KVSERVE_ASSERT_OK(split);
  EXPECT_EQ((*split)->Encode("a a", false), (std::vector<int32_t>{4, 4}));     // ▁a ▁a
  EXPECT_EQ((*split)->Encode("a b", false), (std::vector<int32_t>{4, 1, 0}));  // ▁a ▁ <unk>
}

TEST(TokenizerErrorsTest, MergeOfUnknownPieceIsRefused) {
  TokenizerSpec spec = SmallByteLevelSpec();
  spec.merges.push_back({"ab", "zz"});
  const absl::Status status = SpecStatus(std::move(spec));
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("merge #1 'ab zz': 'zz' is not in the vocabulary")));
}

TEST(TokenizerErrorsTest, MergeWhoseResultIsMissingIsRefused) {
  TokenizerSpec spec = SmallByteLevelSpec();
  spec.merges.push_back({"b", "c"});
  EXPECT_THAT(SpecStatus(std::move(spec)), StatusIs(_, HasSubstr("'bc' is not in the vocabulary")));
}

TEST(TokenizerErrorsTest, StructuralProblemsAreRefused) {
  EXPECT_THAT(SpecStatus(TokenizerSpec{}), StatusIs(_, HasSubstr("empty vocabulary")));
  TokenizerSpec kinds = SmallByteLevelSpec();
  kinds.kinds = {TokenKind::kNormal};
  EXPECT_THAT(SpecStatus(std::move(kinds)), StatusIs(_, HasSubstr("1 token types for 257 tokens")));
  TokenizerSpec bos = SmallByteLevelSpec();
  bos.bos_id = 999;
  EXPECT_THAT(SpecStatus(std::move(bos)), StatusIs(_, HasSubstr("bos id 999 is outside")));
  TokenizerSpec no_merges = SmallByteLevelSpec();
  no_merges.merges.clear();
  EXPECT_THAT(SpecStatus(std::move(no_merges)), StatusIs(_, HasSubstr("has no merges")));
  TokenizerSpec spm;
  spm.type = TokenizerType::kSentencePieceBpe;
  spm.pieces = {"<unk>", "a"};
  spm.byte_fallback = true;
  EXPECT_THAT(SpecStatus(std::move(spm)), StatusIs(_, HasSubstr("no token '<0x00>'")));
}

absl::Status GgufStatus(const testing::GgufTestWriter& writer) {
  const std::string bytes = writer.Build();
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Parse(bytes));
  return Tokenizer::FromGguf(*gguf).status();
}

TEST(TokenizerErrorsTest, GgufProblemsNameTheKey) {
  testing::GgufTestWriter no_model;
  EXPECT_THAT(GgufStatus(no_model), StatusIs(_, HasSubstr("tokenizer.ggml.model")));

  testing::GgufTestWriter bert;
  bert.AddString("tokenizer.ggml.model", "bert");
  EXPECT_THAT(GgufStatus(bert), StatusIs(absl::StatusCode::kUnimplemented));

  testing::GgufTestWriter no_tokens;
  no_tokens.AddString("tokenizer.ggml.model", "gpt2");
  EXPECT_THAT(GgufStatus(no_tokens), StatusIs(_, HasSubstr("tokenizer.ggml.tokens")));

  testing::GgufTestWriter bad_merge;
  bad_merge.AddString("tokenizer.ggml.model", "gpt2");
  bad_merge.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  bad_merge.AddStringArray("tokenizer.ggml.merges", {"ab"});
  EXPECT_THAT(GgufStatus(bad_merge),
              StatusIs(_, HasSubstr("tokenizer.ggml.merges[0] = 'ab' is not two pieces")));

  testing::GgufTestWriter bad_pre;
  bad_pre.AddString("tokenizer.ggml.model", "gpt2");
  bad_pre.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  bad_pre.AddStringArray("tokenizer.ggml.merges", {"a b"});
  bad_pre.AddString("tokenizer.ggml.pre", "mystery");
  EXPECT_THAT(GgufStatus(bad_pre), StatusIs(_, HasSubstr("unsupported pre-tokenizer 'mystery'")));

  testing::GgufTestWriter bad_type;
  bad_type.AddString("tokenizer.ggml.model", "gpt2");
  bad_type.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  bad_type.AddStringArray("tokenizer.ggml.merges", {"a b"});
  bad_type.AddI32Array("tokenizer.ggml.token_type", {1, 1, 9});
  EXPECT_THAT(GgufStatus(bad_type), StatusIs(_, HasSubstr("token_type[2] = 9")));
}

class TokenizerJsonErrorsTest : public ::testing::Test {
 protected:
  // Writes `json` as tokenizer.json in a fresh directory and loads it.
  absl::Status Load(const std::string& json) {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_tokenizer_json_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "tokenizer.json") << json;
    return Tokenizer::FromHfJson((dir_ / "tokenizer.json").string()).status();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(TokenizerJsonErrorsTest, ReportsWhatIsWrong) {
  EXPECT_THAT(Tokenizer::FromHfJson("/nonexistent/tokenizer.json"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Load("{not json"), StatusIs(_, HasSubstr("not valid JSON")));
  const std::string byte_level = R"("pre_tokenizer": {"type": "ByteLevel"}, )";
  EXPECT_THAT(Load("{" + byte_level + R"("model": {"type": "WordPiece"}})"),
              StatusIs(_, HasSubstr("model.type 'WordPiece' is not supported")));
  EXPECT_THAT(Load("{" + byte_level + R"("model": {"type": "BPE", "vocab": {"a": "x"}}})"),
              StatusIs(_, HasSubstr("tokenizer.json")));  // wrong JSON type, caught and named
  EXPECT_THAT(Load("{" + byte_level +
                   R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 2}, "merges": []}})"),
              StatusIs(_, HasSubstr("no token has id 1")));
  EXPECT_THAT(Load(R"({"normalizer": {"type": "NFKC"}, "pre_tokenizer": null,
                       "model": {"type": "BPE", "vocab": {}}})"),
              StatusIs(_, HasSubstr("unsupported normalizer step")));
  EXPECT_THAT(Load(R"({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                         {"type": "Split", "pattern": {"Regex": "\\w+"}}, {"type": "ByteLevel",
                         "use_regex": false}]}, "model": {"type": "BPE", "vocab": {}}})"),
              StatusIs(_, HasSubstr("unsupported pre_tokenizer split pattern")));
}

}  // namespace
}  // namespace kvserve
