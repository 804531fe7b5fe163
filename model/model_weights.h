// ModelWeights: every weight of a Llama-family decoder in fp32, owned, whatever file it came from;
// or, when the loader was asked to keep them (LoadOptions::keep_stored_types), the matrices left
// in their file's storage type (GGUF blocks, f16, bf16) as views into the mapped file.
// Matrices are row-major [out_features, in_features], so a linear layer is y = W x (for a batch
// X [tokens, in]: Y = X W^T). The CPU kernels read these directly; a GPU runner converts them.
// A tensor-parallel rank's weights (tp_rank of tp_size, model/tensor_parallel.h) hold only its
// share: the shapes below with the local head counts and MLP width of its TensorShard.
// Not thread-safe to mutate; immutable after loading and safe to share for reading.
#ifndef KVSERVE_MODEL_MODEL_WEIGHTS_H_
#define KVSERVE_MODEL_MODEL_WEIGHTS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "model/model_config.h"
#include "model/tensor_parallel.h"

namespace kvserve {

// Head counts and the intermediate size are the shard's (all of the model's at tp_size 1).
struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> wq;         // [num_heads * head_dim, hidden]
  std::vector<float> wk;         // [num_kv_heads * head_dim, hidden]
  std::vector<float> wv;         // [num_kv_heads * head_dim, hidden]
  std::vector<float> bq;         // [num_heads * head_dim]; empty unless config.attention_bias
  std::vector<float> bk;         // [num_kv_heads * head_dim]; empty unless attention_bias
  std::vector<float> bv;         // [num_kv_heads * head_dim]; empty unless attention_bias
  std::vector<float> wo;         // [hidden, num_heads * head_dim]
  std::vector<float> ffn_norm;   // [hidden]
  std::vector<float> w_gate;     // [intermediate, hidden]
  std::vector<float> w_up;       // [intermediate, hidden]
  std::vector<float> w_down;     // [hidden, intermediate]
};

// A matrix kept as its file stores it: row-major [out, in], rows of RowBytes(dtype, in) bytes.
struct StoredMatrix {
  kernels::DType dtype;
  const uint8_t* data;  // [num_bytes], into ModelWeights::storage
  int64_t num_bytes;
};

struct ModelWeights {
  ModelConfig config;  // the whole model's, also for a shard
  // The share these weights are: rank tp_rank of a tensor-parallel group of tp_size.
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  // Matrices kept as stored, by their Validate() name ("layers.3.wq", "token_embedding"); the
  // fp32 vector of such a matrix is empty. `storage` keeps what the views point into alive: the
  // mapped file, and `shard_storage` the column slices a rank gathered from it row by row.
  absl::flat_hash_map<std::string, StoredMatrix> stored;
  std::shared_ptr<const void> storage;
  std::shared_ptr<const void> shard_storage;
  // For a reader of a copy of a stored matrix (DeviceWeights packing it): drops from this process
  // the file pages under [data, data + bytes), which are read again from the file if touched.
  // Empty when there is nothing to drop; a range outside the file drops nothing.
  std::function<void(const uint8_t* data, int64_t bytes)> drop_stored_pages;
  // Matrices stored in a block type whose column slice does not fall on block boundaries, so
  // this rank decoded its slice to fp32 instead of keeping it as stored (e.g. "layers.0.wo").
  std::vector<std::string> decoded_for_shard;
  std::vector<float> token_embedding;  // [vocab, hidden]
  std::vector<LayerWeights> layers;    // [num_layers]
  std::vector<float> final_norm;       // [hidden]
  std::vector<float> lm_head;          // [vocab, hidden]; empty when config.tie_word_embeddings

  // The output projection: lm_head, or the token embedding when tied.
  const std::vector<float>& output_weight() const {
    return config.tie_word_embeddings ? token_embedding : lm_head;
  }

  // This rank's share (tensor_parallel.h); its errors are MakeTensorShard's.
  absl::StatusOr<TensorShard> shard() const { return MakeTensorShard(config, tp_rank, tp_size); }

  // OK when config and the shard are valid and every vector has exactly the size its comment
  // gives for the shard (or is empty, its matrix stored with exactly the bytes the shape takes);
  // otherwise INVALID_ARGUMENT naming the tensor (e.g. "layers.3.wk: 36864 floats, want 110592").
  absl::Status Validate() const;
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_MODEL_WEIGHTS_H_
