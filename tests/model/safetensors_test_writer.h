// Test-only writers for safetensors files and Hugging Face checkpoint directories (header-only).
// SafetensorsTestWriter lays tensors out back to back after the JSON header; dtypes F32, F16 and
// BF16 are encoded from float values, anything else is written as raw bytes.
#ifndef KVSERVE_TESTS_MODEL_SAFETENSORS_TEST_WRITER_H_
#define KVSERVE_TESTS_MODEL_SAFETENSORS_TEST_WRITER_H_

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/dequantize.h"
#include "nlohmann/json.hpp"

namespace kvserve::testing {

class SafetensorsTestWriter {
 public:
  // Encodes `values` as `dtype` ("F32", "F16" or "BF16").
  void Add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const std::vector<float>& values) {
    std::string bytes;
    for (float v : values) {
      if (dtype == "F32") {
        bytes.append(reinterpret_cast<const char*>(&v), 4);
      } else {
        const uint16_t half = dtype == "F16" ? FloatToHalf(v) : FloatToBFloat16(v);
        bytes.append(reinterpret_cast<const char*>(&half), 2);
      }
    }
    AddRaw(name, dtype, shape, bytes);
  }
  void AddRaw(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
              const std::string& bytes) {
    header_[name] = {{"dtype", dtype},
                     {"shape", shape},
                     {"data_offsets", {data_.size(), data_.size() + bytes.size()}}};
    data_ += bytes;
  }
  nlohmann::json& header() { return header_; }  // for tests that corrupt entries

  std::string Build() const {
    const std::string header = header_.empty() ? "{}" : header_.dump();
    std::string out(8, '\0');
    const uint64_t length = header.size();
    std::memcpy(out.data(), &length, 8);
    return out + header + data_;
  }

 private:
  nlohmann::json header_ = nlohmann::json::object();
  std::string data_;
};

inline void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              (name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// Value i of the Hugging Face tensor numbered t in WriteTinyHfModel.
inline float TinyHfValue(int t, int64_t i) {
  return 0.002f * static_cast<float>((i * 5 + t * 11) % 89) - 0.088f;
}

// Writes a tiny Llama checkpoint (2 layers, hidden 32, 2 heads, 1 KV head, ffn 64, vocab 40) to
// `dir`: config.json plus weights in `num_shards` (1 or 2) safetensors files (2: an index json).
// Tensor t holds TinyHfValue(t, i) in F32, F16 or BF16 by turns (t % 3). `skip` leaves one
// tensor out.
inline std::vector<std::string> WriteTinyHfModel(const std::filesystem::path& dir, int num_shards,
                                                 const std::string& skip = "") {
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"hidden_size", 32},
                                 {"intermediate_size", 64},
                                 {"num_hidden_layers", 2},
                                 {"num_attention_heads", 2},
                                 {"num_key_value_heads", 1},
                                 {"vocab_size", 40},
                                 {"max_position_embeddings", 256},
                                 {"rms_norm_eps", 1e-5},
                                 {"rope_theta", 500000.0},
                                 {"rope_scaling",
                                  {{"rope_type", "llama3"},
                                   {"factor", 8.0},
                                   {"low_freq_factor", 1.0},
                                   {"high_freq_factor", 4.0},
                                   {"original_max_position_embeddings", 64}}},
                                 {"tie_word_embeddings", false},
                                 {"bos_token_id", 1},
                                 {"eos_token_id", {2, 7}}};
  WriteFile(dir / "config.json", config.dump(2));
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {40, 32}}};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    tensors.push_back({p + "input_layernorm.weight", {32}});
    tensors.push_back({p + "self_attn.q_proj.weight", {32, 32}});
    tensors.push_back({p + "self_attn.k_proj.weight", {16, 32}});
    tensors.push_back({p + "self_attn.v_proj.weight", {16, 32}});
    tensors.push_back({p + "self_attn.o_proj.weight", {32, 32}});
    tensors.push_back({p + "post_attention_layernorm.weight", {32}});
    tensors.push_back({p + "mlp.gate_proj.weight", {64, 32}});
    tensors.push_back({p + "mlp.up_proj.weight", {64, 32}});
    tensors.push_back({p + "mlp.down_proj.weight", {32, 64}});
  }
  tensors.push_back({"model.norm.weight", {32}});
  tensors.push_back({"lm_head.weight", {40, 32}});
  static const char* kDtypes[] = {"F32", "F16", "BF16"};
  std::vector<SafetensorsTestWriter> shards(num_shards);
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::string> names;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto& [name, shape] = tensors[t];
    names.push_back(name);
    if (name == skip) continue;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = TinyHfValue(static_cast<int>(t), i);
    const int shard = static_cast<int>(t * num_shards / tensors.size());
    shards[shard].Add(name, kDtypes[t % 3], shape, values);
    weight_map[name] = "model-0000" + std::to_string(shard + 1) + "-of-0000" +
                       std::to_string(num_shards) + ".safetensors";
  }
  if (num_shards == 1) {
    WriteFile(dir / "model.safetensors", shards[0].Build());
  } else {
    for (int s = 0; s < num_shards; ++s) {
      WriteFile(dir / ("model-0000" + std::to_string(s + 1) + "-of-0000" +
                       std::to_string(num_shards) + ".safetensors"),
                shards[s].Build());
    }
    const nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
    WriteFile(dir / "model.safetensors.index.json", index.dump(2));
  }
  return names;
}

// The value a tensor of WriteTinyHfModel decodes to (rounded through its dtype).
inline float TinyHfDecoded(int t, int64_t i) {
  const float v = TinyHfValue(t, i);
  switch (t % 3) {
    case 1:
      return HalfToFloat(FloatToHalf(v));
    case 2:
      return BFloat16ToFloat(FloatToBFloat16(v));
    default:
      return v;
  }
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_MODEL_SAFETENSORS_TEST_WRITER_H_
