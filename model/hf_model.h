// Loading a Hugging Face checkpoint directory: config.json (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM) plus weights in model.safetensors, or in shards listed by
// model.safetensors.index.json, or in the directory's only *.safetensors file. Tensors may be
// F32, F16 or BF16; all become fp32. HF checkpoints pair RoPE dimensions as (i, i + d/2), so
// rope_style is kHalf. Stateless functions.
#ifndef KVSERVE_MODEL_HF_MODEL_H_
#define KVSERVE_MODEL_HF_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace kvserve {

// Parses the text of a config.json. INVALID_ARGUMENT naming the field for a missing or
// malformed value, UNIMPLEMENTED for an architecture or rope_scaling type we do not run.
// The result passes ModelConfig::Validate.
absl::StatusOr<ModelConfig> ConfigFromHfJson(std::string_view json_text);

struct HfLoadOptions {
  int num_threads = 2;  // conversion threads
  // Read only the share of rank tp_rank of a tensor-parallel group of tp_size
  // (tensor_parallel.h).
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
};

// Reads `dir`/config.json and the safetensors weights. A missing tensor or a shape mismatch is
// INVALID_ARGUMENT naming the tensor (and the file for a bad safetensors file).
absl::StatusOr<ModelWeights> LoadHfModel(const std::string& dir, const HfLoadOptions& options = {});

}  // namespace kvserve

#endif  // KVSERVE_MODEL_HF_MODEL_H_
