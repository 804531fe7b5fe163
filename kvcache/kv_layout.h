// Describes the device memory of the paged KV cache of one rank; kvcache/ only does the
// arithmetic, the model runner owns the memory.
//
// Memory layout (the one place it is written down): for each layer, one K pool and one V pool,
// each a dense array
//     [num_blocks][num_kv_heads_local][block_size][head_dim]   of `dtype`
// A block id names the same token range in every layer. Token position p of a sequence lives in
// slot = block_table[p / block_size] * block_size + p % block_size, and element
//     pool[(slot / block_size) * num_kv_heads_local * block_size * head_dim
//          + head * block_size * head_dim + (slot % block_size) * head_dim + d].
// Slot -1 (kPaddingSlot) marks a padding position: kernels skip it. Block 0 is the null block
// (never allocated), so its memory is scratch.
//
// Thread-safety: a plain value; const methods are safe from any thread.

#ifndef KVSERVE_KVCACHE_KV_LAYOUT_H_
#define KVSERVE_KVCACHE_KV_LAYOUT_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace kvserve {

// Element type of the K/V pools. kFp8 is E4M3 (one byte).
enum class KvDtype { kF32, kF16, kBF16, kFp8 };

// Bytes per element of `dtype`.
int KvDtypeBytes(KvDtype dtype);
std::string_view KvDtypeName(KvDtype dtype);

// Block sizes the cache accepts: a power of two in [1, 256] (8, 16 and 32 are the ones used in
// production; kernels may accept fewer). Returns INVALID_ARGUMENT naming `block_size` otherwise.
absl::Status ValidateBlockSize(int block_size);

struct KvLayout {
  int num_layers = 0;
  int num_kv_heads_local = 0;  // KV heads held by this rank (total / tensor-parallel size)
  int block_size = 16;         // tokens per block
  int head_dim = 0;
  KvDtype dtype = KvDtype::kF16;

  // OK when every size is positive and the block size is valid.
  absl::Status Validate() const;

  // Elements of one block in one pool (K or V of one layer): kv_heads * block_size * head_dim.
  int64_t elements_per_block_per_pool() const;
  // Bytes of one block in one pool.
  int64_t bytes_per_block_per_pool() const;
  // Bytes one block takes across all layers, K and V: 2 * layers * bytes_per_block_per_pool.
  int64_t bytes_per_block() const;
  // Bytes of one layer's K (or V) pool for `num_blocks` blocks.
  int64_t pool_bytes(int64_t num_blocks) const;
  // How many blocks (null block included) fit in `kv_bytes`; 0 when not even one does.
  // REQUIRES: Validate().ok()
  int64_t NumBlocksForBudget(int64_t kv_bytes) const;
};

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_KV_LAYOUT_H_
