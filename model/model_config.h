// ModelConfig: the shape and constants of a Llama-family decoder (Llama 2/3, Mistral, Qwen2,
// SmolLM2), whichever file it came from (GGUF metadata, Hugging Face config.json, or a synthetic
// shape). A plain value; Validate() checks it once after loading.
#ifndef KVSERVE_MODEL_MODEL_CONFIG_H_
#define KVSERVE_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvserve {

// How RoPE pairs the dimensions of a head.
//   kInterleaved: pairs (x[2i], x[2i+1]) — GGUF "llama" files (llama.cpp permutes Q/K rows so).
//   kHalf:        pairs (x[i], x[i + d/2]) — Hugging Face checkpoints, GGUF qwen2 ("neox").
enum class RopeStyle { kInterleaved, kHalf };

// Scaling of RoPE frequencies for long contexts.
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;               // llama3 only
  float high_freq_factor = 4.0f;              // llama3 only
  int32_t original_max_position = 8192;       // llama3 only
};

struct ModelConfig {
  std::string architecture = "llama";  // "llama" or "qwen2" (qwen2: Q/K/V have biases)
  std::string name;                    // human-readable, from the file
  int32_t num_layers = 0;
  int32_t hidden_size = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;                // usually hidden_size / num_heads
  int32_t intermediate_size = 0;
  int32_t vocab_size = 0;
  int32_t max_context = 0;             // context length the model was trained for
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kHalf;
  RopeScaling rope_scaling;
  float rms_norm_eps = 1e-5f;
  bool tie_word_embeddings = false;    // lm_head shares the token embedding matrix
  bool attention_bias = false;         // Q/K/V projections have biases (qwen2)
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;  // generation stops at any of them

  // OK when every size is positive and consistent (heads divide into KV heads, ...); otherwise
  // INVALID_ARGUMENT naming the field.
  absl::Status Validate() const;
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_MODEL_CONFIG_H_
