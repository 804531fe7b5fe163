// Basic identifiers shared by the KV cache bookkeeping (kvcache/) and its users.
//
// A block id names the same token range in every layer's K and V pools (see kv_layout.h). Block
// 0 is the reserved null block: it is never handed out, so a block table entry of 0 or a slot of
// -1 can mean "padding" to the kernels.

#ifndef KVSERVE_KVCACHE_TYPES_H_
#define KVSERVE_KVCACHE_TYPES_H_

#include <cstdint>

namespace kvserve {

using TokenId = int32_t;
using BlockId = int32_t;
using SequenceId = uint64_t;

// The reserved null block; never allocated, never freed, never cached.
inline constexpr BlockId kNullBlock = 0;

// Slot value that marks a padding position in a slot mapping.
inline constexpr int64_t kPaddingSlot = -1;

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_TYPES_H_
