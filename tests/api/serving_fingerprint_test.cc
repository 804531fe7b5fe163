// The serving fingerprint (api/serving_fingerprint.h): equal for the same tokenizer and block
// size, different for another tokenizer, chat template (a --chat_template override included) or
// block size, and the mismatch names the parts that differ. Real tokenizers: the default model's
// and a small Hugging Face fixture.

#include "api/serving_fingerprint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "model/default_model.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"
#include "tokenizer/prompt_renderer.h"

namespace kvserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::Not;

namespace v1 = kvserve::v1;

TEST(ServingFingerprintTest, TheSameTokenizerAndBlockSizeGiveTheSameFingerprint) {
  std::unique_ptr<Tokenizer> a = testing::DefaultModelTokenizer();
  std::unique_ptr<Tokenizer> b = testing::DefaultModelTokenizer();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const v1::ServingFingerprint ours = ServingFingerprintOf(a.get(), 16);
  EXPECT_THAT(ours.tokenizer(), MatchesRegex("[0-9a-f]{32}"));
  EXPECT_THAT(ours.chat_template(), MatchesRegex("[0-9a-f]{32}"));
  EXPECT_THAT(ours.block_hash(), MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(ours.kv_block_size(), 16);
  EXPECT_EQ(FingerprintMismatch(ours, ServingFingerprintOf(b.get(), 16)), "");
}

TEST(ServingFingerprintTest, AnotherTokenizerIsNamed) {
  std::unique_ptr<Tokenizer> smollm = testing::DefaultModelTokenizer();
  std::unique_ptr<Tokenizer> other = testing::HfFixtureTokenizer("tokenizer_bytelevel_small");
  ASSERT_NE(smollm, nullptr);
  ASSERT_NE(other, nullptr);
  const v1::ServingFingerprint ours = ServingFingerprintOf(smollm.get(), 16);
  const v1::ServingFingerprint theirs = ServingFingerprintOf(other.get(), 16);
  const std::string mismatch = FingerprintMismatch(ours, theirs);
  EXPECT_THAT(mismatch, AllOf(HasSubstr("tokenizer " + theirs.tokenizer()),
                              HasSubstr("!= router's " + ours.tokenizer()),
                              Not(HasSubstr("kv_block_size")), Not(HasSubstr("block_hash"))));
}

TEST(ServingFingerprintTest, AnotherChatTemplateIsNamed) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const v1::ServingFingerprint ours = ServingFingerprintOf(tokenizer.get(), 16);
  v1::ServingFingerprint theirs = ours;
  theirs.set_chat_template("00000000000000000000000000000000");
  EXPECT_THAT(FingerprintMismatch(ours, theirs),
              AllOf(HasSubstr("chat_template 0000"), Not(HasSubstr("tokenizer "))));
}

TEST(ServingFingerprintTest, AChatTemplateOverrideIsWhatIsDigested) {
  // --chat_template on the router (PromptRenderer::Load) and on the worker (SetChatTemplate
  // before serving) digests the file's template, not the model's.
  const std::string path = ::testing::TempDir() + "/override.jinja";
  const std::string jinja = "{% for m in messages %}{{ m.content }}{% endfor %}";
  std::ofstream(path) << jinja;
  absl::StatusOr<std::unique_ptr<PromptRenderer>> router =
      PromptRenderer::Load(DefaultModelPath(), path);
  ASSERT_TRUE(router.ok()) << router.status();
  std::unique_ptr<Tokenizer> model = testing::DefaultModelTokenizer();
  std::unique_ptr<Tokenizer> worker = testing::DefaultModelTokenizer();
  ASSERT_NE(model, nullptr);
  ASSERT_NE(worker, nullptr);
  worker->SetChatTemplate(jinja);
  const v1::ServingFingerprint ours = ServingFingerprintOf((*router)->tokenizer(), 16);
  EXPECT_EQ(FingerprintMismatch(ours, ServingFingerprintOf(worker.get(), 16)), "");
  EXPECT_THAT(FingerprintMismatch(ours, ServingFingerprintOf(model.get(), 16)),
              AllOf(HasSubstr("chat_template"), Not(HasSubstr("tokenizer "))));
}

TEST(ServingFingerprintTest, AnotherBlockSizeChangesTheBlockHashToo) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const v1::ServingFingerprint ours = ServingFingerprintOf(tokenizer.get(), 16);
  const v1::ServingFingerprint theirs = ServingFingerprintOf(tokenizer.get(), 32);
  EXPECT_NE(ours.block_hash(), theirs.block_hash());
  EXPECT_THAT(FingerprintMismatch(ours, theirs),
              AllOf(HasSubstr("kv_block_size 32 != router's 16"), HasSubstr("block_hash")));
}

TEST(ServingFingerprintTest, AWorkerWithoutATokenizerIsComparedOnItsBlocksOnly) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const v1::ServingFingerprint ours = ServingFingerprintOf(tokenizer.get(), 16);
  const v1::ServingFingerprint token_ids_only = ServingFingerprintOf(nullptr, 16);
  EXPECT_EQ(token_ids_only.tokenizer(), "");
  EXPECT_EQ(token_ids_only.chat_template(), "");
  EXPECT_EQ(token_ids_only.block_hash(), ours.block_hash());
  EXPECT_EQ(FingerprintMismatch(ours, token_ids_only), "");
  EXPECT_THAT(FingerprintMismatch(ours, ServingFingerprintOf(nullptr, 32)),
              HasSubstr("kv_block_size 32"));
}

TEST(ServingFingerprintTest, AWorkerThatReportsNoFingerprintDiffers) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_THAT(
      FingerprintMismatch(ServingFingerprintOf(tokenizer.get(), 16), v1::ServingFingerprint()),
      AllOf(HasSubstr("kv_block_size 0 != router's 16"), HasSubstr("block_hash (none)")));
}

}  // namespace
}  // namespace kvserve
