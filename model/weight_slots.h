// WeightSlots: the one list of every tensor a ModelWeights holds, with its name in each file
// format and its shape, so that the GGUF reader, the Hugging Face reader and the synthetic
// generator fill the same fields in the same way. Stateless.
#ifndef KVSERVE_MODEL_WEIGHT_SLOTS_H_
#define KVSERVE_MODEL_WEIGHT_SLOTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model_weights.h"

namespace kvserve {

struct WeightSlot {
  enum class Kind { kMatrix, kNorm, kBias };
  Kind kind;
  std::string name;            // ModelWeights path, as Validate() names it: "layers.3.wq"
  std::string gguf_name;       // llama.cpp name: "blk.3.attn_q.weight"
  std::string hf_name;         // Hugging Face name: "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // row-major: [out, in] for a matrix, [n] otherwise
  std::vector<float>* out;     // the field to fill; not resized here
};

// Checks that a file holding `num_tensors` tensors can hold every slot of `config` (at least
// nine per layer), so that a header claiming absurdly many layers is refused before anything is
// allocated for them. INVALID_ARGUMENT otherwise.
absl::Status CheckTensorCount(const ModelConfig& config, size_t num_tensors);

// Slots of every tensor `weights->config` calls for: biases only with attention_bias, lm_head
// only when the embeddings are not tied. Resizes weights->layers to config.num_layers.
std::vector<WeightSlot> WeightSlots(ModelWeights* weights);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_WEIGHT_SLOTS_H_
