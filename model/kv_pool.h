// HostKvPool: the memory of the paged KV cache in host RAM, fp32, for the CPU forward pass.
// For every layer one K pool and one V pool, each [num_blocks, num_kv_heads, block_size,
// head_dim] as kvcache/kv_layout.h describes. The KV cache manager (kvcache/) decides which
// block holds what; this object only owns the floats and hands out per-layer kernel views.
//
// Memory is allocated once in Create and zero-filled; nothing allocates afterwards.
// Thread-safety: not synchronised; the engine thread (or a test) owns it.
#ifndef KVSERVE_MODEL_KV_POOL_H_
#define KVSERVE_MODEL_KV_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernels.h"
#include "kvcache/kv_layout.h"

namespace kvserve {

class HostKvPool {
 public:
  // Allocates num_blocks blocks (block 0, the null block, included) for every layer.
  // INVALID_ARGUMENT when the layout is invalid, its dtype is not kF32, or num_blocks < 2;
  // RESOURCE_EXHAUSTED when the pools would exceed 64 GiB (a sign of a wrong budget).
  static absl::StatusOr<std::unique_ptr<HostKvPool>> Create(const KvLayout& layout,
                                                            int32_t num_blocks);

  const KvLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int64_t bytes() const;

  // The view the kernels take for layer `layer`. REQUIRES: 0 <= layer < layout().num_layers.
  kernels::PagedKvView Layer(int32_t layer);

  // Fills every pool with zeros (tests use it to start over without reallocating).
  void Clear();

 private:
  HostKvPool(const KvLayout& layout, int32_t num_blocks);

  KvLayout layout_;
  int32_t num_blocks_;
  std::vector<std::vector<float>> k_;  // [num_layers][num_blocks, kv_heads, block_size, head_dim]
  std::vector<std::vector<float>> v_;  // [num_layers][num_blocks, kv_heads, block_size, head_dim]
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_KV_POOL_H_
