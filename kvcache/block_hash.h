// Chained block hash of the prefix cache, shared by the worker's KV cache and the router.
//
// A block's hash names the whole token prefix up to and including that block:
//   hash(block i) = XXH3-128(hash(block i-1) || token ids of block i || extra keys || len(extra))
// with hash(block -1) = BlockHash{} (all zero). The byte encoding is fixed (little-endian 64-bit
// halves of the parent hash, int32 token ids, the extra-key bytes, then their length as a uint64)
// so that every process computes the same value. Extra keys are opaque bytes that must also
// match for two prefixes to share K/V; the tenant's cache salt goes in block 0's extra keys, so
// tenants with different salts never share blocks.
//
// Only full blocks are hashed. The hash is an index, not a proof: the KV cache compares stored
// token ids on every hit (see block_pool.h).
//
// Thread-safety: pure functions, safe from any thread.

#ifndef KVSERVE_KVCACHE_BLOCK_HASH_H_
#define KVSERVE_KVCACHE_BLOCK_HASH_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "kvcache/types.h"

namespace kvserve {

// A 128-bit block hash. Value type; BlockHash{} is the parent of block 0.
struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;

  template <typename H>
  friend H AbslHashValue(H state, const BlockHash& hash) {
    return H::combine(std::move(state), hash.low, hash.high);
  }

  // 32 lowercase hex digits, high half first; for logs and debugging.
  std::string ToHex() const;
};

// Hash of one full block given its parent's hash. `tokens` are the block's token ids;
// `extra_keys` are opaque bytes (empty for every block but the first in the common case).
BlockHash HashBlock(const BlockHash& parent, absl::Span<const TokenId> tokens,
                    std::string_view extra_keys);

// Hashes every full block of `tokens` (tokens.size() / block_size of them), chaining from
// BlockHash{}, with `cache_salt` as block 0's extra keys. Appends to `*hashes` (it is not
// cleared, so the caller can reuse its capacity).
// REQUIRES: block_size > 0.
void HashFullBlocks(absl::Span<const TokenId> tokens, int block_size, std::string_view cache_salt,
                    std::vector<BlockHash>* hashes);

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_BLOCK_HASH_H_
