#include "model/synthetic_weights.h"

#include <cmath>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/weight_slots.h"

namespace kvserve {
namespace {

ModelConfig Shape(int32_t layers, int32_t hidden, int32_t heads, int32_t kv_heads,
                  int32_t intermediate, int32_t vocab, int32_t context, float theta) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.max_context = context;
  c.rope_theta = theta;
  c.rope_style = RopeStyle::kHalf;
  c.rms_norm_eps = 1e-5f;
  return c;
}

std::vector<std::pair<std::string, ModelConfig>> Presets() {
  std::vector<std::pair<std::string, ModelConfig>> presets;
  ModelConfig tiny = Shape(2, 64, 4, 2, 192, 256, 512, 10000.0f);
  tiny.name = "synthetic tiny";
  tiny.bos_token_id = 1;
  tiny.eos_token_ids = {2};
  presets.emplace_back("tiny", tiny);
  ModelConfig tiny_qwen2 = tiny;
  tiny_qwen2.name = "synthetic tiny-qwen2";
  tiny_qwen2.architecture = "qwen2";
  tiny_qwen2.attention_bias = true;
  tiny_qwen2.tie_word_embeddings = true;
  tiny_qwen2.rms_norm_eps = 1e-6f;
  presets.emplace_back("tiny-qwen2", tiny_qwen2);
  ModelConfig tiny_tp = Shape(2, 128, 8, 4, 256, 256, 512, 10000.0f);
  tiny_tp.name = "synthetic tiny-tp";
  tiny_tp.bos_token_id = 1;
  tiny_tp.eos_token_ids = {2};
  presets.emplace_back("tiny-tp", tiny_tp);
  ModelConfig smollm2 = Shape(30, 576, 9, 3, 1536, 49152, 8192, 100000.0f);
  smollm2.name = "synthetic smollm2-135m";
  smollm2.tie_word_embeddings = true;
  smollm2.bos_token_id = 1;
  smollm2.eos_token_ids = {2};
  presets.emplace_back("smollm2-135m", smollm2);
  ModelConfig llama3 = Shape(32, 4096, 32, 8, 14336, 128256, 8192, 500000.0f);
  llama3.name = "synthetic llama3-8b";
  llama3.bos_token_id = 128000;
  llama3.eos_token_ids = {128001, 128009};
  presets.emplace_back("llama3-8b", llama3);
  return presets;
}

// splitmix64: a tiny, well-mixed generator; one stream per tensor.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Symmetric() { return static_cast<float>(Next() >> 40) * 0x1.0p-23f - 1.0f; }
  // Moves ahead by n draws (the state is a counter), so any part of a stream is cheap to reach.
  void Skip(uint64_t n) { state_ += n * 0x9E3779B97F4A7C15ull; }

 private:
  uint64_t state_;
};

uint64_t HashName(uint64_t seed, std::string_view name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name, keyed by the seed
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// One tensor to fill: values center + U(-1, 1) * half_width, in row-major order of the whole
// tensor, of which `slice` is kept (a tensor-parallel rank's part: the same values the whole
// model holds there).
struct FillJob {
  std::string name;
  std::vector<float>* out;
  TensorSlice slice;
  float center;
  float half_width;
};

void Fill(const FillJob& job, uint64_t seed) {
  const TensorSlice& part = job.slice;
  job.out->resize(static_cast<size_t>(part.num_elements()));
  float* out = job.out->data();  // [num_rows, num_cols]
  for (int64_t r = 0; r < part.num_rows; ++r) {
    Random random(HashName(seed, job.name));
    random.Skip(static_cast<uint64_t>((part.row_begin + r) * part.cols + part.col_begin));
    for (int64_t c = 0; c < part.num_cols; ++c) {
      *out++ = job.center + random.Symmetric() * job.half_width;
    }
  }
}

}  // namespace

absl::StatusOr<ModelConfig> SyntheticConfig(std::string_view preset) {
  for (auto& [name, config] : Presets()) {
    if (name == preset) return config;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown synthetic preset '", absl::string_view(preset.data(), preset.size()),
                   "'; presets: ", absl::StrJoin(SyntheticPresetNames(), ", ")));
}

std::vector<std::string> SyntheticPresetNames() {
  std::vector<std::string> names;
  for (auto& [name, config] : Presets()) names.push_back(name);
  return names;
}

int64_t NumParameters(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  const int64_t per_layer = 2 * hidden + 2 * q_dim * hidden + 2 * kv_dim * hidden +
                            3 * hidden * c.intermediate_size +
                            (c.attention_bias ? q_dim + 2 * kv_dim : 0);
  const int64_t embeddings = static_cast<int64_t>(c.vocab_size) * hidden;
  return embeddings * (c.tie_word_embeddings ? 1 : 2) + per_layer * c.num_layers + hidden;
}

ModelWeights MakeSyntheticWeights(const ModelConfig& config, uint64_t seed, int32_t tp_rank,
                                  int32_t tp_size) {
  ModelWeights weights;
  weights.config = config;
  weights.tp_rank = tp_rank;
  weights.tp_size = tp_size;
  std::vector<FillJob> jobs;
  for (const WeightSlot& slot : WeightSlots(&weights)) {
    const int64_t fan_in = slot.shape.back();  // of the whole matrix
    switch (slot.kind) {
      case WeightSlot::Kind::kMatrix:  // U(-a, a) has std a / sqrt(3)
        jobs.push_back(
            {slot.name, slot.out, slot.slice, 0.0f, std::sqrt(3.0f / static_cast<float>(fan_in))});
        break;
      case WeightSlot::Kind::kNorm:
        jobs.push_back({slot.name, slot.out, slot.slice, 1.0f, 0.1f});
        break;
      case WeightSlot::Kind::kBias:
        jobs.push_back({slot.name, slot.out, slot.slice, 0.0f, 0.02f * std::sqrt(3.0f)});
        break;
    }
  }
  // Two threads, alternating jobs: the per-layer pattern repeats, so the halves balance.
  std::thread second([&] {
    for (size_t j = 1; j < jobs.size(); j += 2) Fill(jobs[j], seed);
  });
  for (size_t j = 0; j < jobs.size(); j += 2) Fill(jobs[j], seed);
  second.join();
  return weights;
}

}  // namespace kvserve
