// LoadWeights: each kind of spec (GGUF path, Hugging Face directory, synthetic preset with
// options) loads, and anything else is a clear error.
#include "model/weights_loader.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/default_model.h"
#include "model/synthetic_weights.h"
#include "tests/model/gguf_test_writer.h"
#include "tests/model/safetensors_test_writer.h"

namespace kvserve {
namespace {

using ::kvserve::testing::TempDir;
using ::kvserve::testing::TinyModelGguf;
using ::kvserve::testing::WriteFile;
using ::kvserve::testing::WriteTinyHfModel;

bool Contains(const absl::Status& status, std::string_view text) {
  return std::string_view(status.message().data(), status.message().size()).find(text) !=
         std::string_view::npos;
}

TEST(WeightsLoaderTest, ParsesSyntheticSpecs) {
  absl::StatusOr<SyntheticSpec> spec = ParseSyntheticSpec("synthetic:llama3-8b:layers=2:seed=9");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->preset, "llama3-8b");
  EXPECT_EQ(spec->num_layers, 2);
  EXPECT_EQ(spec->seed, 9u);
  spec = ParseSyntheticSpec("synthetic:tiny");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->num_layers, -1);
  EXPECT_EQ(spec->seed, 0u);
  EXPECT_TRUE(Contains(ParseSyntheticSpec("synthetic:tiny:layers=0").status(), "layers="));
  EXPECT_TRUE(Contains(ParseSyntheticSpec("synthetic:tiny:seed=x").status(), "seed="));
  EXPECT_TRUE(Contains(ParseSyntheticSpec("synthetic:tiny:depth=3").status(), "'depth=3'"));
}

TEST(WeightsLoaderTest, LoadsSyntheticPresetWithOverrides) {
  absl::StatusOr<ModelWeights> w = LoadWeights("synthetic:tiny:layers=3:seed=5");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->config.num_layers, 3);
  EXPECT_TRUE(w->Validate().ok());
  ModelConfig config = *SyntheticConfig("tiny");
  config.num_layers = 3;
  EXPECT_EQ(w->layers[2].wv, MakeSyntheticWeights(config, 5).layers[2].wv);
  EXPECT_EQ(LoadWeights("synthetic:huge").status().code(), absl::StatusCode::kNotFound);
}

TEST(WeightsLoaderTest, LoadsGgufFilesAndHfDirectories) {
  TempDir dir("weights_loader");
  const std::filesystem::path gguf = dir.path() / "tiny.gguf";
  WriteFile(gguf, TinyModelGguf());
  absl::StatusOr<ModelWeights> from_gguf = LoadWeights(gguf.string());
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status();
  EXPECT_EQ(from_gguf->config.name, "tiny llama");
  EXPECT_EQ(from_gguf->config.rope_style, RopeStyle::kInterleaved);

  const std::filesystem::path hf = dir.path() / "hf";
  std::filesystem::create_directories(hf);
  WriteTinyHfModel(hf, 1);
  absl::StatusOr<ModelWeights> from_hf = LoadWeights(hf.string());
  ASSERT_TRUE(from_hf.ok()) << from_hf.status();
  EXPECT_EQ(from_hf->config.vocab_size, 40);
  EXPECT_EQ(from_hf->config.rope_style, RopeStyle::kHalf);
}

TEST(WeightsLoaderTest, AnythingElseIsAClearError) {
  TempDir dir("weights_loader_bad");
  absl::StatusOr<ModelWeights> w = LoadWeights(dir.path().string());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(w.status(), "directory has no config.json")) << w.status();
  w = LoadWeights("/nonexistent/model.bin");
  EXPECT_TRUE(Contains(w.status(), "no such file or directory")) << w.status();
  EXPECT_TRUE(Contains(w.status(), "synthetic:<preset>")) << w.status();
  WriteFile(dir.path() / "model.bin", "hello");
  w = LoadWeights((dir.path() / "model.bin").string());
  EXPECT_TRUE(Contains(w.status(), "not a .gguf file or a directory")) << w.status();
  WriteFile(dir.path() / "broken.gguf", "GGUF");
  w = LoadWeights((dir.path() / "broken.gguf").string());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(w.status(), "broken.gguf: GGUF truncated")) << w.status();
  w = LoadWeights((dir.path() / "missing.gguf").string());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound) << w.status();
}

TEST(WeightsLoaderTest, LoadsTheDefaultModel) {
  const std::string path = DefaultModelPath();
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/setup.sh to fetch the default model";
  absl::StatusOr<ModelWeights> w = LoadWeights(path);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->config.num_layers, 30);
  EXPECT_EQ(w->token_embedding.size(), 49152u * 576u);
}

}  // namespace
}  // namespace kvserve
