// LoadWeights: the one entry point that turns a model spec into fp32 ModelWeights, whatever the
// source. A spec is
//   - a path to a .gguf file (GGUF v2/v3, llama or qwen2; see gguf_model.h),
//   - a Hugging Face checkpoint directory (config.json + safetensors; see hf_model.h), or
//   - "synthetic:<preset>[:layers=N][:seed=S]": random weights of a preset shape
//     (synthetic_weights.h; layers overrides num_layers, seed defaults to 0).
// Anything else is INVALID_ARGUMENT saying what a spec may be. Thread-safe (no shared state).
#ifndef KVSERVE_MODEL_WEIGHTS_LOADER_H_
#define KVSERVE_MODEL_WEIGHTS_LOADER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "model/tensor_parallel.h"

namespace kvserve {

struct LoadOptions {
  // GGUF files: keep every non-F32 matrix as stored (ModelWeights::stored), for backends that
  // compute from quantized blocks; other sources ignore it.
  bool keep_stored_types = false;
  // Load only the share of rank tensor_parallel.rank of a group of tensor_parallel.size
  // (tensor_parallel.h; comm is not used here). A model that cannot be split so is
  // INVALID_ARGUMENT naming the numbers.
  TensorParallel tensor_parallel = {};
};

absl::StatusOr<ModelWeights> LoadWeights(const std::string& spec, const LoadOptions& options = {});

// The model's configuration alone, without reading its weights (a GGUF file's header, a
// checkpoint's config.json, a synthetic preset): for what needs the shape and not the numbers,
// e.g. a simulated worker. Errors as LoadWeights gives them.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& spec);

// The parsed form of a "synthetic:..." spec.
struct SyntheticSpec {
  std::string preset;
  int32_t num_layers = -1;  // -1: the preset's
  uint64_t seed = 0;
};
absl::StatusOr<SyntheticSpec> ParseSyntheticSpec(const std::string& spec);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_WEIGHTS_LOADER_H_
