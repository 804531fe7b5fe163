#include "model/tensor_parallel.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<TensorShard> MakeTensorShard(const ModelConfig& config, int32_t rank, int32_t size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor-parallel rank ", rank, " of size ", size,
                                                   ": want size >= 1 and 0 <= rank < size"));
  }
  const int32_t heads = config.num_heads;
  const int32_t kv_heads = config.num_kv_heads;
  if (heads % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_heads = ", heads, " is not divisible by tensor_parallel_size = ", size));
  }
  if (kv_heads >= size ? kv_heads % size != 0 : size % kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_kv_heads = ", kv_heads, " can be neither split across nor replicated over ",
        "tensor_parallel_size = ", size, " (want one a multiple of the other)"));
  }
  if (config.intermediate_size % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("intermediate_size = ", config.intermediate_size,
                     " is not divisible by tensor_parallel_size = ", size));
  }
  TensorShard shard;
  shard.rank = rank;
  shard.size = size;
  shard.head_dim = config.head_dim;
  shard.num_heads = heads / size;
  shard.first_head = rank * shard.num_heads;
  if (kv_heads >= size) {
    shard.num_kv_heads = kv_heads / size;
    shard.first_kv_head = rank * shard.num_kv_heads;
  } else {
    // size / kv_heads consecutive ranks share a KV head; their query heads are all in its group.
    shard.num_kv_heads = 1;
    shard.first_kv_head = rank / (size / kv_heads);
  }
  shard.intermediate_size = config.intermediate_size / size;
  shard.first_intermediate = rank * shard.intermediate_size;
  return shard;
}

TensorShard FullShard(const ModelConfig& config) {
  return TensorShard{.rank = 0,
                     .size = 1,
                     .head_dim = config.head_dim,
                     .num_heads = config.num_heads,
                     .first_head = 0,
                     .num_kv_heads = config.num_kv_heads,
                     .first_kv_head = 0,
                     .intermediate_size = config.intermediate_size,
                     .first_intermediate = 0};
}

}  // namespace kvserve
