// LoadWeights: each kind of spec (GGUF path, Hugging Face directory, synthetic preset with
// options) loads, and anything else is a clear error.
#include "model/weights_loader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/default_model.h"
#include "model/synthetic_weights.h"
#include "tests/model/gguf_test_writer.h"
#include "tests/model/safetensors_test_writer.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::kvserve::testing::TempDir;
using ::kvserve::testing::TinyModelGguf;
using ::kvserve::testing::WriteFile;
using ::kvserve::testing::WriteTinyHfModel;
using ::testing::HasSubstr;
using ::testing::_;

TEST(WeightsLoaderTest, ParsesSyntheticSpecs) {
  absl::StatusOr<SyntheticSpec> spec = ParseSyntheticSpec("synthetic:llama3-8b:layers=2:seed=9");
  KVSERVE_ASSERT_OK(spec);
  EXPECT_EQ(spec->preset, "llama3-8b");
  EXPECT_EQ(spec->num_layers, 2);
  EXPECT_EQ(spec->seed, 9u);
  spec = ParseSyntheticSpec("synthetic:tiny");
  KVSERVE_ASSERT_OK(spec);
  EXPECT_EQ(spec->num_layers, -1);
  EXPECT_EQ(spec->seed, 0u);
  EXPECT_THAT(ParseSyntheticSpec("synthetic:tiny:layers=0"), StatusIs(_, HasSubstr("layers=")));
  EXPECT_THAT(ParseSyntheticSpec("synthetic:tiny:seed=x"), StatusIs(_, HasSubstr("seed=")));
  EXPECT_THAT(ParseSyntheticSpec("synthetic:tiny:depth=3"), StatusIs(_, HasSubstr("'depth=3'")));
}

TEST(WeightsLoaderTest, LoadsSyntheticPresetWithOverrides) {
  absl::StatusOr<ModelWeights> w = LoadWeights("synthetic:tiny:layers=3:seed=5");
  KVSERVE_ASSERT_OK(w);
  EXPECT_EQ(w->config.num_layers, 3);
  KVSERVE_EXPECT_OK(w->Validate());
  ModelConfig config = *SyntheticConfig("tiny");
  config.num_layers = 3;
  EXPECT_EQ(w->layers[2].wv, MakeSyntheticWeights(config, 5).layers[2].wv);
  EXPECT_THAT(LoadWeights("synthetic:huge"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(WeightsLoaderTest, LoadsGgufFilesAndHfDirectories) {
  TempDir dir("weights_loader");
  const std::filesystem::path gguf = dir.path() / "tiny.gguf";
  WriteFile(gguf, TinyModelGguf());
  absl::StatusOr<ModelWeights> from_gguf = LoadWeights(gguf.string());
  KVSERVE_ASSERT_OK(from_gguf);
  EXPECT_EQ(from_gguf->config.name, "tiny llama");
  EXPECT_EQ(from_gguf->config.rope_style, RopeStyle::kInterleaved);

  const std::filesystem::path hf = dir.path() / "hf";
  std::filesystem::create_directories(hf);
  WriteTinyHfModel(hf, 1);
  absl::StatusOr<ModelWeights> from_hf = LoadWeights(hf.string());
  KVSERVE_ASSERT_OK(from_hf);
  EXPECT_EQ(from_hf->config.vocab_size, 40);
  EXPECT_EQ(from_hf->config.rope_style, RopeStyle::kHalf);
}

TEST(WeightsLoaderTest, AnythingElseIsAClearError) {
  TempDir dir("weights_loader_bad");
  absl::StatusOr<ModelWeights> w = LoadWeights(dir.path().string());
  EXPECT_THAT(
      w, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("directory has no config.json")));
  w = LoadWeights("/nonexistent/model.bin");
  EXPECT_THAT(w, StatusIs(_, HasSubstr("no such file or directory")));
  EXPECT_THAT(w, StatusIs(_, HasSubstr("synthetic:<preset>")));
  WriteFile(dir.path() / "model.bin", "hello");
  w = LoadWeights((dir.path() / "model.bin").string());
  EXPECT_THAT(w, StatusIs(_, HasSubstr("not a .gguf file or a directory")));
  WriteFile(dir.path() / "broken.gguf", "GGUF");
  w = LoadWeights((dir.path() / "broken.gguf").string());
  EXPECT_THAT(
      w, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("broken.gguf: GGUF truncated")));
  w = LoadWeights((dir.path() / "missing.gguf").string());
  EXPECT_THAT(w, StatusIs(absl::StatusCode::kNotFound));
}

TEST(WeightsLoaderTest, LoadsTheDefaultModel) {
  const std::string path = DefaultModelPath();
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/setup.sh to fetch the default model";
  absl::StatusOr<ModelWeights> w = LoadWeights(path);
  KVSERVE_ASSERT_OK(w);
  EXPECT_EQ(w->config.num_layers, 30);
  EXPECT_EQ(w->token_embedding.size(), 49152u * 576u);
}

}  // namespace
}  // namespace kvserve
