// Hugging Face checkpoints: config.json fields (rope_scaling, eos lists, tied embeddings, qwen2)
// and a tiny written checkpoint read back, single-file and sharded, with bad files rejected.
#include "model/hf_model.h"

#include <gtest/gtest.h>

#include "tests/model/safetensors_test_writer.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::SafetensorsTestWriter;
using ::kvserve::testing::StatusIs;
using ::kvserve::testing::TempDir;
using ::kvserve::testing::TinyHfDecoded;
using ::kvserve::testing::WriteFile;
using ::kvserve::testing::WriteTinyHfModel;
using ::testing::HasSubstr;
using ::testing::_;

TEST(HfConfigTest, ReadsQwen2Config) {
  absl::StatusOr<ModelConfig> c = ConfigFromHfJson(R"({
    "architectures": ["Qwen2ForCausalLM"], "_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
    "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "rope_scaling": null, "tie_word_embeddings": true, "bos_token_id": 151643,
    "eos_token_id": 151645, "sliding_window": 32768})");
  KVSERVE_ASSERT_OK(c);
  EXPECT_EQ(c->architecture, "qwen2");
  EXPECT_EQ(c->name, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalf);
  EXPECT_EQ(c->rope_theta, 1e6f);
  EXPECT_EQ(c->rms_norm_eps, 1e-6f);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c->bos_token_id, 151643);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{151645}));
}

TEST(HfConfigTest, ReadsLlama3RopeScalingAndEosList) {
  absl::StatusOr<ModelConfig> c = ConfigFromHfJson(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
  KVSERVE_ASSERT_OK(c);
  EXPECT_EQ(c->architecture, "llama");
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c->rope_scaling.factor, 8.0f);
  EXPECT_EQ(c->rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(c->rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(c->rope_scaling.original_max_position, 8192);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
}

TEST(HfConfigTest, LinearScalingAndErrorsNameTheField) {
  const std::string base = R"("architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 100, "max_position_embeddings": 64)";
  absl::StatusOr<ModelConfig> c =
      ConfigFromHfJson("{" + base + R"(, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  KVSERVE_ASSERT_OK(c);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c->rope_scaling.factor, 2.0f);
  EXPECT_EQ(c->num_kv_heads, 4);  // defaults to num_attention_heads

  c = ConfigFromHfJson("{" + base + R"(, "rope_scaling": {"type": "yarn", "factor": 2.0}})");
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("'yarn'")));
  c = ConfigFromHfJson(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})");
  EXPECT_THAT(c, StatusIs(_, HasSubstr("'num_hidden_layers' is missing")));
  c = ConfigFromHfJson("{" + base + R"(, "num_key_value_heads": "four"})");
  EXPECT_THAT(c, StatusIs(_, HasSubstr("'num_key_value_heads' is not a 32-bit integer")));
  c = ConfigFromHfJson("{" + base + R"(, "num_key_value_heads": 3})");
  EXPECT_THAT(c, StatusIs(_, HasSubstr("num_heads = 4 is not a multiple of num_kv_heads = 3")));
  c = ConfigFromHfJson(R"({"architectures": ["GPT2LMHeadModel"]})");
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kUnimplemented));
  c = ConfigFromHfJson("not json");
  EXPECT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument));
}

void ExpectTinyWeights(const ModelWeights& w) {
  // Tensor numbering of WriteTinyHfModel: embed 0; layer l: 1 + 9 l + (in_norm, q, k, v, o,
  // post_norm, gate, up, down); norm 19; lm_head 20. Dtype by t % 3: F32, F16, BF16.
  KVSERVE_EXPECT_OK(w.Validate());
  EXPECT_EQ(w.config.rope_style, RopeStyle::kHalf);
  EXPECT_EQ(w.config.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(w.config.eos_token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(w.token_embedding[123], TinyHfDecoded(0, 123));
  EXPECT_EQ(w.layers[0].wq[40], TinyHfDecoded(2, 40));        // BF16
  EXPECT_EQ(w.layers[0].wk[17], TinyHfDecoded(3, 17));        // F32
  EXPECT_EQ(w.layers[1].attn_norm[5], TinyHfDecoded(10, 5));  // F16
  // down_proj [32 out, 64 in]: row 3, col 5.
  EXPECT_EQ(w.layers[1].w_down[3 * 64 + 5], TinyHfDecoded(18, 3 * 64 + 5));
  EXPECT_EQ(w.final_norm[31], TinyHfDecoded(19, 31));
  EXPECT_EQ(w.lm_head[40 * 32 - 1], TinyHfDecoded(20, 40 * 32 - 1));
}

TEST(HfModelTest, LoadsSingleFileCheckpoint) {
  TempDir dir("hf_single");
  WriteTinyHfModel(dir.path(), 1);
  absl::StatusOr<ModelWeights> weights = LoadHfModel(dir.path().string());
  KVSERVE_ASSERT_OK(weights);
  ExpectTinyWeights(*weights);
}

TEST(HfModelTest, LoadsShardedCheckpointThroughTheIndex) {
  TempDir dir("hf_sharded");
  WriteTinyHfModel(dir.path(), 2);
  absl::StatusOr<ModelWeights> weights = LoadHfModel(dir.path().string());
  KVSERVE_ASSERT_OK(weights);
  ExpectTinyWeights(*weights);
}

TEST(HfModelTest, MissingTensorIsNamed) {
  TempDir dir("hf_missing");
  WriteTinyHfModel(dir.path(), 2, "model.layers.1.mlp.up_proj.weight");
  absl::StatusOr<ModelWeights> weights = LoadHfModel(dir.path().string());
  EXPECT_THAT(weights, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("'model.layers.1.mlp.up_proj.weight' is missing")));
}

TEST(HfModelTest, ShapeMismatchAndBadFilesAreNamed) {
  TempDir dir("hf_bad");
  WriteTinyHfModel(dir.path(), 1);
  // Replace the weights with a file whose k_proj has the transposed shape.
  {
    SafetensorsTestWriter w;
    w.Add("model.layers.0.self_attn.k_proj.weight", "F32", {32, 16}, std::vector<float>(512));
    for (int i = 0; i < 30; ++i) w.Add("pad" + std::to_string(i), "F32", {1}, {0});
    WriteFile(dir.path() / "model.safetensors", w.Build());
  }
  absl::StatusOr<ModelWeights> weights = LoadHfModel(dir.path().string());
  EXPECT_THAT(weights, StatusIs(_, HasSubstr("'model.embed_tokens.weight' is missing")));
  WriteTinyHfModel(dir.path(), 1);
  std::string bytes;
  {
    std::ifstream in(dir.path() / "model.safetensors", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  WriteFile(dir.path() / "model.safetensors", bytes.substr(0, bytes.size() - 10));
  weights = LoadHfModel(dir.path().string());
  EXPECT_THAT(weights, StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("model.safetensors: safetensors tensor")));
  std::filesystem::remove(dir.path() / "model.safetensors");
  weights = LoadHfModel(dir.path().string());
  EXPECT_THAT(weights, StatusIs(absl::StatusCode::kNotFound));
  weights = LoadHfModel((dir.path() / "nowhere").string());
  EXPECT_THAT(weights, StatusIs(absl::StatusCode::kNotFound));
}

TEST(HfModelTest, TransposedShapeIsNamed) {
  TempDir dir("hf_shape");
  WriteTinyHfModel(dir.path(), 1);
  std::string bytes;
  {
    std::ifstream in(dir.path() / "model.safetensors", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t header_length;
  std::memcpy(&header_length, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_length));
  header["model.layers.0.self_attn.k_proj.weight"]["shape"] = {32, 16};
  std::string new_header = header.dump();
  const uint64_t new_length = new_header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &new_length, 8);
  WriteFile(dir.path() / "model.safetensors", out + new_header + bytes.substr(8 + header_length));
  absl::StatusOr<ModelWeights> weights = LoadHfModel(dir.path().string());
  EXPECT_THAT(
      weights,
      StatusIs(
          _,
          HasSubstr("'model.layers.0.self_attn.k_proj.weight' has shape [32, 16], want [16, 32]")));
}

}  // namespace
}  // namespace kvserve
