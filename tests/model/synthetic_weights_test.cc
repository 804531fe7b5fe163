// Synthetic weights: presets, exact parameter counts, determinism per (seed, tensor), and value
// scales that keep activations sane.
#include "model/synthetic_weights.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

struct Moments {
  double mean = 0, std = 0, min = 1e30, max = -1e30;
};

Moments Measure(const std::vector<float>& v) {
  Moments m;
  double sum = 0, sum_sq = 0;
  for (float x : v) {
    sum += x;
    sum_sq += static_cast<double>(x) * x;
    m.min = std::min<double>(m.min, x);
    m.max = std::max<double>(m.max, x);
  }
  m.mean = sum / v.size();
  m.std = std::sqrt(sum_sq / v.size() - m.mean * m.mean);
  return m;
}

TEST(SyntheticWeightsTest, PresetsAreValidAndUnknownOnesListTheChoices) {
  for (const std::string& name : SyntheticPresetNames()) {
    absl::StatusOr<ModelConfig> config = SyntheticConfig(name);
    KVSERVE_ASSERT_OK(config) << name;
    KVSERVE_EXPECT_OK(config->Validate()) << name;
  }
  absl::StatusOr<ModelConfig> unknown = SyntheticConfig("gpt5");
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kNotFound,
                                HasSubstr("tiny, tiny-qwen2, tiny-tp, smollm2-135m, llama3-8b")));
}

TEST(SyntheticWeightsTest, PresetShapesAndParameterCounts) {
  const ModelConfig llama3 = *SyntheticConfig("llama3-8b");
  EXPECT_EQ(llama3.num_layers, 32);
  EXPECT_EQ(llama3.hidden_size, 4096);
  EXPECT_EQ(llama3.num_heads, 32);
  EXPECT_EQ(llama3.num_kv_heads, 8);
  EXPECT_EQ(llama3.head_dim, 128);
  EXPECT_EQ(llama3.intermediate_size, 14336);
  EXPECT_EQ(llama3.vocab_size, 128256);
  EXPECT_EQ(llama3.rope_theta, 500000.0f);
  EXPECT_EQ(NumParameters(llama3), 8030261248);  // 32.1 GB in fp32
  const ModelConfig smollm2 = *SyntheticConfig("smollm2-135m");
  EXPECT_EQ(smollm2.hidden_size, 576);
  EXPECT_EQ(smollm2.num_kv_heads, 3);
  EXPECT_TRUE(smollm2.tie_word_embeddings);
  EXPECT_EQ(NumParameters(smollm2), 134515008);
  EXPECT_EQ(NumParameters(*SyntheticConfig("tiny")), 131392);
  EXPECT_EQ(NumParameters(*SyntheticConfig("tiny-qwen2")), 115264);
  EXPECT_EQ(NumParameters(*SyntheticConfig("tiny-tp")), 361088);
}

TEST(SyntheticWeightsTest, WeightsMatchTheirShapesAndCount) {
  for (const char* preset : {"tiny", "tiny-qwen2", "tiny-tp"}) {
    const ModelConfig config = *SyntheticConfig(preset);
    const ModelWeights w = MakeSyntheticWeights(config, 1);
    KVSERVE_EXPECT_OK(w.Validate()) << preset;
    int64_t total = w.token_embedding.size() + w.final_norm.size() + w.lm_head.size();
    for (const LayerWeights& l : w.layers) {
      for (const std::vector<float>* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.bq, &l.bk, &l.bv,
                                          &l.wo, &l.ffn_norm, &l.w_gate, &l.w_up, &l.w_down}) {
        total += t->size();
      }
    }
    EXPECT_EQ(total, NumParameters(config)) << preset;
  }
}

TEST(SyntheticWeightsTest, DeterministicPerSeedAndIndependentOfLayerCount) {
  ModelConfig config = *SyntheticConfig("tiny");
  const ModelWeights a = MakeSyntheticWeights(config, 42);
  const ModelWeights b = MakeSyntheticWeights(config, 42);
  const ModelWeights c = MakeSyntheticWeights(config, 43);
  EXPECT_EQ(a.layers[1].w_up, b.layers[1].w_up);
  EXPECT_EQ(a.token_embedding, b.token_embedding);
  EXPECT_NE(a.layers[1].w_up, c.layers[1].w_up);
  EXPECT_NE(a.layers[0].wq, a.layers[1].wq);
  config.num_layers = 1;
  const ModelWeights one = MakeSyntheticWeights(config, 42);
  EXPECT_EQ(one.layers[0].wq, a.layers[0].wq);
  EXPECT_EQ(one.lm_head, a.lm_head);
}

TEST(SyntheticWeightsTest, ScalesKeepActivationsSane) {
  ModelConfig config = *SyntheticConfig("smollm2-135m");
  config.num_layers = 2;
  const ModelWeights w = MakeSyntheticWeights(config, 7);
  const Moments down = Measure(w.layers[1].w_down);  // fan_in 1536
  EXPECT_NEAR(down.mean, 0.0, 1e-3);
  EXPECT_NEAR(down.std, 1.0 / std::sqrt(1536.0), 0.01 / std::sqrt(1536.0));
  const Moments q = Measure(w.layers[0].wq);  // fan_in 576
  EXPECT_NEAR(q.std, 1.0 / std::sqrt(576.0), 0.01 / std::sqrt(576.0));
  const Moments norm = Measure(w.layers[0].attn_norm);
  EXPECT_GE(norm.min, 0.9);
  EXPECT_LE(norm.max, 1.1);
  EXPECT_NEAR(norm.mean, 1.0, 0.02);
  // A unit-variance input keeps unit variance through a projection: y = W x.
  std::vector<float> x(576);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 2 == 0 ? 1.0f : -1.0f);
  std::vector<float> y(1536, 0.0f);
  for (int r = 0; r < 1536; ++r) {
    for (int k = 0; k < 576; ++k) y[r] += w.layers[0].w_gate[r * 576 + k] * x[k];
  }
  EXPECT_NEAR(Measure(y).std, 1.0, 0.1);
  const ModelWeights qwen = MakeSyntheticWeights(*SyntheticConfig("tiny-qwen2"), 7);
  EXPECT_NEAR(Measure(qwen.layers[0].bq).std, 0.02, 0.006);
}

}  // namespace
}  // namespace kvserve
