// ConfigFromGguf / WeightsFromGguf: metadata to ModelConfig, tensors to fp32 ModelWeights with
// shapes checked, on tiny generated files and on the default model.
#include "model/gguf_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "base/status_macros.h"
#include "model/default_model.h"
#include "model/dequantize.h"
#include "nlohmann/json.hpp"
#include "tests/model/gguf_test_writer.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::GgufTestWriter;
using ::kvserve::testing::StatusIs;
using ::kvserve::testing::TinyModelGguf;
using ::kvserve::testing::TinyModelOptions;
using ::kvserve::testing::TinyModelValue;
using ::testing::HasSubstr;
using ::testing::_;

absl::StatusOr<ModelWeights> Load(const std::string& bytes, const GgufLoadOptions& options = {}) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Parse(bytes));
  return WeightsFromGguf(*file, options);
}

TEST(GgufModelTest, ReadsLlamaConfigFromMetadata) {
  const std::string bytes = TinyModelGguf();
  std::unique_ptr<GgufFile> file = *GgufFile::Parse(bytes);
  absl::StatusOr<ModelConfig> config = ConfigFromGguf(*file);
  KVSERVE_ASSERT_OK(config);
  EXPECT_EQ(config->architecture, "llama");
  EXPECT_EQ(config->name, "tiny llama");
  EXPECT_EQ(config->num_layers, 2);
  EXPECT_EQ(config->hidden_size, 32);
  EXPECT_EQ(config->num_heads, 2);
  EXPECT_EQ(config->num_kv_heads, 1);
  EXPECT_EQ(config->head_dim, 16);
  EXPECT_EQ(config->intermediate_size, 64);
  EXPECT_EQ(config->vocab_size, 32);
  EXPECT_EQ(config->max_context, 128);
  EXPECT_EQ(config->rope_theta, 5000.0f);
  EXPECT_EQ(config->rms_norm_eps, 1e-6f);
  EXPECT_EQ(config->rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(config->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(config->tie_word_embeddings);
  EXPECT_FALSE(config->attention_bias);
  EXPECT_EQ(config->bos_token_id, 1);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{2, 3}));
}

TEST(GgufModelTest, Qwen2HasBiasesHalfRopeAndTiedEmbeddings) {
  TinyModelOptions options;
  options.architecture = "qwen2";
  options.bias = true;
  options.output_weight = false;
  absl::StatusOr<ModelWeights> weights = Load(TinyModelGguf(options));
  KVSERVE_ASSERT_OK(weights);
  EXPECT_EQ(weights->config.architecture, "qwen2");
  EXPECT_EQ(weights->config.rope_style, RopeStyle::kHalf);
  EXPECT_TRUE(weights->config.attention_bias);
  EXPECT_TRUE(weights->config.tie_word_embeddings);
  EXPECT_TRUE(weights->lm_head.empty());
  EXPECT_EQ(&weights->output_weight(), &weights->token_embedding);
  // Tensor numbering: embd 0, then per layer norm, q, k, v, bq, bk, bv, ...
  ASSERT_EQ(weights->layers[0].bk.size(), 16u);
  EXPECT_EQ(weights->layers[0].bk[5], TinyModelValue(6, 5));
}

TEST(GgufModelTest, WeightsAreRowMajorOutByIn) {
  absl::StatusOr<ModelWeights> weights = Load(TinyModelGguf());
  KVSERVE_ASSERT_OK(weights);
  KVSERVE_EXPECT_OK(weights->Validate());
  const LayerWeights& l1 = weights->layers[1];
  // Layer 1 starts at tensor 1 + 9 = 10: attn_norm 10, q 11, k 12, v 13, o 14, ffn_norm 15,
  // gate 16, up 17, down 18; then output_norm 19, output 20.
  ASSERT_EQ(l1.w_down.size(), 32u * 64u);
  // ggml dims [64, 32] = row-major [32 out, 64 in]; element (row 3, col 5) is index 3 * 64 + 5.
  EXPECT_EQ(l1.w_down[3 * 64 + 5], TinyModelValue(18, 3 * 64 + 5));
  EXPECT_EQ(l1.wk[100], TinyModelValue(12, 100));
  EXPECT_EQ(weights->final_norm[7], TinyModelValue(19, 7));
  EXPECT_EQ(weights->lm_head[1000], TinyModelValue(20, 1000));
  EXPECT_EQ(weights->token_embedding[77], HalfToFloat(FloatToHalf(TinyModelValue(0, 77))));
}

TEST(GgufModelTest, MissingOrMisshapenTensorIsNamed) {
  TinyModelOptions missing;
  missing.skip_tensor = "blk.1.ffn_up.weight";
  absl::StatusOr<ModelWeights> weights = Load(TinyModelGguf(missing));
  EXPECT_THAT(weights, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("'blk.1.ffn_up.weight' is missing")));

  TinyModelOptions wrong;
  wrong.wrong_tensor = "blk.0.attn_k.weight";
  weights = Load(TinyModelGguf(wrong));
  EXPECT_THAT(weights,
              StatusIs(_, HasSubstr("'blk.0.attn_k.weight' has dims [16, 32], want [32, 16]")));
}

TEST(GgufModelTest, AbsurdLayerCountIsRefusedBeforeAllocating) {
  TinyModelOptions options;
  options.block_count = 2000000000;  // found by gguf_fuzz: used to allocate the layer vector
  absl::StatusOr<ModelWeights> weights = Load(TinyModelGguf(options));
  EXPECT_THAT(weights,
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2000000000 layers")));
}

TEST(GgufModelTest, SizeCapIsResourceExhausted) {
  GgufLoadOptions options;
  options.max_total_floats = 1000;
  absl::StatusOr<ModelWeights> weights = Load(TinyModelGguf(), options);
  EXPECT_THAT(weights, StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(GgufModelTest, MetadataProblemsNameTheKey) {
  GgufTestWriter no_arch;
  std::unique_ptr<GgufFile> file = *GgufFile::Parse(no_arch.Build());
  absl::StatusOr<ModelConfig> config = ConfigFromGguf(*file);
  EXPECT_THAT(config, StatusIs(absl::StatusCode::kNotFound, HasSubstr("general.architecture")));

  GgufTestWriter gpt;
  gpt.AddString("general.architecture", "gpt2");
  const std::string gpt_bytes = gpt.Build();
  config = ConfigFromGguf(**GgufFile::Parse(gpt_bytes));
  EXPECT_THAT(config, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("'gpt2'")));

  GgufTestWriter partial;
  partial.AddString("general.architecture", "llama");
  partial.AddU32("llama.block_count", 2);
  const std::string partial_bytes = partial.Build();
  config = ConfigFromGguf(**GgufFile::Parse(partial_bytes));
  EXPECT_THAT(config, StatusIs(_, HasSubstr("llama.embedding_length")));

  GgufTestWriter typed;
  typed.AddString("general.architecture", "llama");
  typed.AddString("llama.block_count", "two");
  const std::string typed_bytes = typed.Build();
  config = ConfigFromGguf(**GgufFile::Parse(typed_bytes));
  EXPECT_THAT(config, StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("'llama.block_count' has type string")));
}

TEST(GgufModelTest, LoadsTheDefaultModel) {
  const std::string path = DefaultModelPath();
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/setup.sh to fetch the default model";
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  KVSERVE_ASSERT_OK(file);
  absl::StatusOr<ModelWeights> weights = WeightsFromGguf(**file);
  KVSERVE_ASSERT_OK(weights);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("default model loaded in %.2f s (2 threads)\n", seconds);
  const ModelConfig& c = weights->config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_context, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2}));
  KVSERVE_EXPECT_OK(weights->Validate());
  // Spot values against the python gguf package (tests/model/make_dequant_fixture.py).
  std::ifstream fixture_file(std::string(KVSERVE_SOURCE_DIR) +
                             "/tests/model/fixtures/dequant_smollm2.json");
  const nlohmann::json fixture = nlohmann::json::parse(fixture_file);
  for (const nlohmann::json& t : fixture["tensors"]) {
    const std::vector<float>* values = nullptr;
    if (t["name"] == "token_embd.weight") values = &weights->token_embedding;
    if (t["name"] == "blk.0.attn_q.weight") values = &weights->layers[0].wq;
    if (t["name"] == "blk.29.ffn_down.weight") values = &weights->layers[29].w_down;
    if (t["name"] == "output_norm.weight") values = &weights->final_norm;
    if (values == nullptr) continue;
    const size_t stride = t["stride"];
    const std::vector<float> strided = t["strided"];
    for (size_t i = 0; i < strided.size(); ++i) {
      EXPECT_EQ((*values)[i * stride], strided[i]) << t["name"] << " " << i * stride;
    }
  }
}

// Kept as stored: every non-F32 matrix is a view of its GGUF bytes (nothing dequantized), the
// norms are fp32, the result validates, and a stored matrix of the wrong size is named.
TEST(GgufModelTest, KeepsQuantizedMatricesAsStored) {
  const std::string path = DefaultModelPath();
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run scripts/setup.sh";
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  KVSERVE_ASSERT_OK(file);
  absl::StatusOr<ModelWeights> weights = WeightsFromGguf(**file, {.keep_stored_types = true});
  KVSERVE_ASSERT_OK(weights);
  // 7 matrices per layer and the (tied) embedding table.
  EXPECT_EQ(weights->stored.size(), 7u * 30 + 1);
  EXPECT_TRUE(weights->layers[0].wq.empty());
  EXPECT_EQ(weights->layers[0].attn_norm.size(), 576u);
  const StoredMatrix& wq = weights->stored.at("layers.0.wq");
  EXPECT_EQ(wq.dtype, kernels::DType::kQ4_1);
  EXPECT_EQ(wq.data, (*file)->FindTensor("blk.0.attn_q.weight")->data);
  EXPECT_EQ(wq.num_bytes, kernels::RowBytes(kernels::DType::kQ4_1, 576) * 576);
  KVSERVE_EXPECT_OK(weights->Validate());
  weights->stored.at("layers.3.w_up").num_bytes -= 20;
  EXPECT_THAT(weights->Validate(), StatusIs(_, HasSubstr("layers.3.w_up")));
}

}  // namespace
}  // namespace kvserve
