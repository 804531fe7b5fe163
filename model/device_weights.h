// DeviceWeights: a model's weights resident in a backend's memory, each matrix in the storage
// type the model runs with, norms and biases in fp32. Built once at load from the ModelWeights a
// reader produced: an fp32 matrix is converted once to the chosen type (f32, bf16, f16); a matrix
// the reader kept as stored (GGUF blocks, ModelWeights::stored) keeps its type. Either is packed
// where the backend has a layout of its own for its type (Backend::PackWeight; the CPU on AVX2 /
// AVX-512: Q8_0, Q4_0, Q4_1 in 16-row tiles, f32 (and bf16 on AVX2) in 8-row panels; a stored
// matrix's file pages are dropped after), else used in place on a host-memory backend (the CPU:
// the file's mapping, no copy) or copied as is. The embedding table stays rows for its lookup; a
// tied output projection gets a packed copy of it, or, where the backend's lookup reads the packed
// form (Backend::EmbeddingReadsPacked: the CPU's f32 and bf16 panels), the one packed table serves
// both.
// After Upload the fp32 host copy may be dropped.
// A tensor-parallel rank's weights hold its share only (shard(); model/tensor_parallel.h): the
// head counts and the MLP width in the shapes below are the shard's.
//
// Thread-safety: immutable after Upload; may be shared read-only by several models on the same
// backend.
#ifndef KVSERVE_MODEL_DEVICE_WEIGHTS_H_
#define KVSERVE_MODEL_DEVICE_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "model/device_buffer.h"
#include "model/model_weights.h"
#include "model/tensor_parallel.h"

namespace kvserve {

// A matrix in backend memory: rows of RowBytes(dtype, cols) bytes, row-major [out, in].
struct WeightView {
  const void* data = nullptr;  // [rows, cols] of dtype
  kernels::DType dtype = kernels::DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  bool packed = false;  // in the backend's own layout (Backend::PackWeight), not as rows
};

struct DeviceLayer {
  const float* attn_norm = nullptr;  // [hidden]
  WeightView wq;                     // [num_heads * head_dim, hidden]
  WeightView wk;                     // [num_kv_heads * head_dim, hidden]
  WeightView wv;                     // [num_kv_heads * head_dim, hidden]
  const float* bq = nullptr;         // [num_heads * head_dim] or nullptr
  const float* bk = nullptr;         // [num_kv_heads * head_dim] or nullptr
  const float* bv = nullptr;         // [num_kv_heads * head_dim] or nullptr
  WeightView wo;                     // [hidden, num_heads * head_dim]
  const float* ffn_norm = nullptr;   // [hidden]
  WeightView w_gate;                 // [intermediate, hidden]
  WeightView w_up;                   // [intermediate, hidden]
  WeightView w_down;                 // [hidden, intermediate]
};

class DeviceWeights {
 public:
  // Converts every fp32 matrix (and the embedding table) of `weights` to `dtype` and copies all
  // of it into `backend`'s memory; stored matrices keep their type (see above). INVALID_ARGUMENT
  // when the weights do not validate or dtype is not f32, bf16 or f16; RESOURCE_EXHAUSTED when
  // the backend runs out of memory.
  // The weights keep the backend alive (models and KV pools made from them borrow it).
  static absl::StatusOr<std::unique_ptr<DeviceWeights>> Upload(
      const ModelWeights& weights, std::shared_ptr<kernels::Backend> backend, kernels::DType dtype);

  const ModelConfig& config() const { return config_; }  // the whole model's
  const TensorShard& shard() const { return shard_; }
  kernels::DType dtype() const { return dtype_; }
  kernels::Backend* backend() const { return backend_.get(); }
  const WeightView& embedding() const { return embedding_; }  // [vocab, hidden]
  const DeviceLayer& layer(int32_t index) const { return layers_[index]; }
  const float* final_norm() const { return final_norm_; }  // [hidden]
  // The output projection: lm_head, or the embedding table when tied (then a packed copy of it
  // where the backend packs its type: the embedding lookup reads its rows as stored).
  const WeightView& output() const { return lm_head_; }
  // Memory the weights take: backend allocations plus stored matrices used in place.
  int64_t bytes() const { return bytes_; }
  // Of those, the bytes every forward step reads: all but the embedding table (its lookup reads a
  // row a token), unless the table is the output projection itself (tied, not packed).
  int64_t step_bytes() const {
    return lm_head_.data == embedding_.data ? bytes_ : bytes_ - embedding_bytes_;
  }
  // Matrices in the backend's own layout (Backend::PackWeight).
  int32_t num_packed() const { return num_packed_; }

 private:
  DeviceWeights(const ModelConfig& config, const TensorShard& shard,
                std::shared_ptr<kernels::Backend> backend, kernels::DType dtype)
      : config_(config), shard_(shard), backend_(std::move(backend)), dtype_(dtype) {}

  // Copies `values` to the backend as fp32 (norms, biases); nullptr for an empty vector.
  absl::StatusOr<const float*> UploadVector(const std::vector<float>& values);
  // Converts `values` ([rows, cols] fp32) to dtype_, or, when `stored` names it, takes the stored
  // matrix; packs it where may_pack and the backend has a form of its own for its type (a stored
  // matrix's file pages are dropped then: weights.drop_stored_pages; a later read of them, the
  // embedding lookup's, faults them back in), else copies it to the backend (a stored matrix on a
  // host-memory backend is used in place).
  absl::StatusOr<WeightView> UploadMatrix(const std::vector<float>& values, int64_t rows,
                                          int64_t cols, const StoredMatrix* stored, bool may_pack,
                                          const ModelWeights& weights);

  ModelConfig config_;
  TensorShard shard_;
  std::shared_ptr<kernels::Backend> backend_;  // declared first: destroyed after buffers_
  kernels::DType dtype_;
  WeightView embedding_;
  WeightView lm_head_;  // the output projection (see output())
  std::vector<DeviceLayer> layers_;
  const float* final_norm_ = nullptr;
  int32_t num_packed_ = 0;
  std::vector<DeviceBuffer> buffers_;  // everything above points into these,
  std::shared_ptr<const void> storage_;  // or into these (stored matrices used in place)
  std::shared_ptr<const void> shard_storage_;
  int64_t bytes_ = 0;
  int64_t embedding_bytes_ = 0;  // of bytes_, the embedding table's
};

// The weight storage type a flag names: "float32", "bfloat16", "float16"; "auto" is bf16 on a
// GPU and f32 on the CPU. INVALID_ARGUMENT naming `flag` otherwise.
absl::StatusOr<kernels::DType> ParseDType(std::string_view value, bool on_gpu,
                                          std::string_view flag);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_DEVICE_WEIGHTS_H_
