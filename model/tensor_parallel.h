// Tensor parallelism, Megatron style: which share of a Llama-family model one rank of a
// tensor-parallel group of `size` ranks holds, and the rules that decide it.
//
//   - Query heads split evenly: rank r holds heads [r * H/tp, (r + 1) * H/tp).
//   - KV heads split evenly when num_kv_heads >= tp; when num_kv_heads < tp (tp a multiple of
//     num_kv_heads) each KV head is replicated on tp / num_kv_heads ranks, and a rank holds the
//     one KV head its query heads read.
//   - q/k/v and gate/up are column-parallel: a rank holds the rows of the [out, in] weight (and
//     of the bias) for its heads or its slice of the MLP width. o_proj and down_proj are
//     row-parallel: a rank holds the columns of the weight that multiply its heads' (or its MLP
//     slice's) activations, and the partial results are summed across ranks (an all-reduce after
//     each). A row-parallel bias would be added on rank 0 only; Llama-family models have none.
//   - Norms, the embedding and lm_head are replicated.
//
// TensorParallel names a process's place in its group and the group's collectives; TensorShard
// is the arithmetic of its share. Plain values; thread-safe.
#ifndef KVSERVE_MODEL_TENSOR_PARALLEL_H_
#define KVSERVE_MODEL_TENSOR_PARALLEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace kvserve {

class Communicator;  // comm/communicator.h

// One rank of a tensor-parallel group. The weight loaders read rank and size; the forward pass
// also needs comm (borrowed; it must outlive the model) when size > 1.
struct TensorParallel {
  int32_t rank = 0;
  int32_t size = 1;
  Communicator* comm = nullptr;
};

// The heads and the MLP slice one rank holds. Every "first_*" is a global index.
struct TensorShard {
  int32_t rank = 0;
  int32_t size = 1;
  int32_t head_dim = 0;
  int32_t num_heads = 0;  // local query heads
  int32_t first_head = 0;
  int32_t num_kv_heads = 0;  // local KV heads (1 when replicated)
  int32_t first_kv_head = 0;
  int32_t intermediate_size = 0;  // local MLP width
  int32_t first_intermediate = 0;

  int64_t q_dim() const { return int64_t{num_heads} * head_dim; }
  int64_t kv_dim() const { return int64_t{num_kv_heads} * head_dim; }
  // Rows of the q, k / v weights this rank holds start at these global rows.
  int64_t first_q_row() const { return int64_t{first_head} * head_dim; }
  int64_t first_kv_row() const { return int64_t{first_kv_head} * head_dim; }
};

// The share of rank `rank` of `size` in `config`'s model. INVALID_ARGUMENT naming the numbers
// when size < 1, rank is outside [0, size), num_heads % size != 0, the KV heads can be neither
// split (num_kv_heads % size) nor replicated (size % num_kv_heads), or
// intermediate_size % size != 0. REQUIRES: config.Validate().ok().
absl::StatusOr<TensorShard> MakeTensorShard(const ModelConfig& config, int32_t rank, int32_t size);

// The whole model as one rank holds it (rank 0 of 1).
TensorShard FullShard(const ModelConfig& config);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_TENSOR_PARALLEL_H_
