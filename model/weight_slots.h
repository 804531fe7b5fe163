// WeightSlots: the one list of every tensor a ModelWeights holds, with its name in each file
// format, its shape and the part of it a tensor-parallel rank reads (the sharding rules of
// model/tensor_parallel.h are applied here, once), so that the GGUF reader, the Hugging Face
// reader and the synthetic generator fill the same fields in the same way. Stateless.
#ifndef KVSERVE_MODEL_WEIGHT_SLOTS_H_
#define KVSERVE_MODEL_WEIGHT_SLOTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model_weights.h"
#include "model/tensor_slice.h"

namespace kvserve {

struct WeightSlot {
  enum class Kind { kMatrix, kNorm, kBias };
  Kind kind;
  std::string name;            // ModelWeights path, as Validate() names it: "layers.3.wq"
  std::string gguf_name;       // llama.cpp name: "blk.3.attn_q.weight"
  std::string hf_name;         // Hugging Face name: "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as stored, row-major: [out, in] for a matrix, [n] otherwise
  // The part this rank holds ([1, n] for a vector): rows of column-parallel matrices, columns of
  // row-parallel ones and of column-parallel biases, the whole of anything replicated.
  TensorSlice slice;
  std::vector<float>* out;  // the field to fill (with the slice); not resized here

  // The shape of the slice: [num_rows, num_cols] for a matrix, [num_cols] otherwise.
  std::vector<int64_t> local_shape() const;
};

// Checks that a file holding `num_tensors` tensors can hold every slot of `config` (at least
// nine per layer), so that a header claiming absurdly many layers is refused before anything is
// allocated for them. INVALID_ARGUMENT otherwise.
absl::Status CheckTensorCount(const ModelConfig& config, size_t num_tensors);

// Slots of every tensor `weights->config` calls for: biases only with attention_bias, lm_head
// only when the embeddings are not tied; sliced for rank weights->tp_rank of weights->tp_size.
// Resizes weights->layers to config.num_layers. REQUIRES: weights->shard().ok().
std::vector<WeightSlot> WeightSlots(ModelWeights* weights);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_WEIGHT_SLOTS_H_
