// KvCacheManager: the paged KV cache bookkeeping the scheduler talks to.
//
// The manager owns a BlockPool and one block table per sequence. A sequence's token position p
// lives in slot block_table[p / block_size] * block_size + p % block_size (layout: kv_layout.h).
// A step of the engine uses it like this:
//   admit:   AddSequence(id, prompt, salt, budget)  attaches the cached prefix and reserves slots
//            for up to `budget` of the remaining prompt tokens (FindCachedPrefix asks first,
//            without side effects);
//   run:     GetSlotMapping / GetBlockTable tell the runner where to write and read K/V;
//   after:   CommitComputed(id, n) once the K/V of n more tokens are written: newly full blocks
//            enter the prefix cache; AppendTokens adds sampled tokens; AllocateSlots(id, n)
//            reserves slots for the next step (a prefill chunk or one decode token);
//   finish:  FreeSequence(id) (also for preemption by recompute); ForkSequence for n > 1.
// Every call that needs blocks is all or nothing: on RESOURCE_EXHAUSTED nothing has changed.
//
// With a host tier (KvCacheConfig::num_host_blocks > 0, host_block_pool.h) a cached block the
// pool hands out for other tokens is kept in host memory instead of being dropped, and a prompt
// whose hash chain continues there after the device's cached prefix gets new device blocks that
// are filled from the host instead of being computed. Both kinds of copy are recorded as
// HostCopy entries in the order they happen; TakeHostCopies hands them over, and the runner must
// run them in that order before the step's forward (step_plan.h). Recording order makes every
// copy read what it should: an eviction to the host reads the device block before any later
// copy or forward overwrites it, and a load reads a host entry before any later eviction reuses
// it (the entries a prompt hits are pinned while AddSequence allocates its blocks).
//
// Choices worth knowing:
// - The last token of a prompt is never served from the cache, even when the whole prompt is
//   cached: the step needs the logits of that position, so at least one token is computed.
// - Only full, computed blocks are cached; block tables are append-only. A block is shared by
//   reference count (prefix hits, forks); the partial last block of a fork is copied, and the
//   (src, dst) pair is returned so that the runner copies its K/V before the next step.
// - A prefix hit is accepted only when the block hash, the stored token ids and the link to the
//   block before it all match (BlockPool::Matches), so even a hash collision cannot serve wrong
//   K/V. When two sequences compute the same block, the first one's copy is cached.
// - Attaching cached blocks that are free (evictable) takes them out of the free count, so
//   AddSequence needs new blocks + evictable hits <= free blocks.
// - Capacity (Stats): total = every block but the null block; free = ref count 0, which
//   includes evictable ones (cached prefixes nobody holds, reclaimed on demand); used = held by
//   at least one sequence; free + used = total at all times.
// - Errors: INVALID_ARGUMENT for bad arguments, NOT_FOUND for an unknown (or already freed)
//   sequence, ALREADY_EXISTS for a duplicate sequence id, RESOURCE_EXHAUSTED for no room,
//   FAILED_PRECONDITION for calls out of order (committing slots that were never allocated).
//
// Thread-safety: not thread-safe. One engine thread owns the manager; other threads reach it
// through the engine's queues.

#ifndef KVSERVE_KVCACHE_KV_CACHE_MANAGER_H_
#define KVSERVE_KVCACHE_KV_CACHE_MANAGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kvcache/block_hash.h"
#include "kvcache/block_pool.h"
#include "kvcache/host_block_pool.h"
#include "kvcache/kv_events.h"
#include "kvcache/types.h"

namespace kvserve {

struct KvCacheConfig {
  int num_blocks = 0;       // null block included, so num_blocks - 1 are usable; at least 2
  int block_size = 16;      // tokens per block; see ValidateBlockSize
  uint64_t epoch = 0;       // event epoch; 0 draws a random non-zero one
  int num_host_blocks = 0;  // blocks of the host tier; 0: no host tier

  absl::Status Validate() const;
};

// Result of a prefix lookup: the leading `num_tokens` (= num_blocks * block_size) prompt tokens
// are cached; the last `num_host_blocks` of those blocks only in the host tier (each needs a
// free device block to be copied into); `num_evictable_blocks` of the device ones are free now,
// so attaching them lowers the free count by that much.
struct PrefixMatch {
  int num_blocks = 0;
  int num_tokens = 0;
  int num_evictable_blocks = 0;
  int num_host_blocks = 0;
};

struct SequenceStart {
  int num_cached_tokens = 0;   // served from the prefix cache (or a swap), already computed
  int num_host_tokens = 0;     // of those, copied back from the host tier
  int num_swapped_tokens = 0;  // of those, the partial block PreemptSequence kept
  int num_new_tokens = 0;      // slots reserved for tokens num_cached_tokens.. onwards
};

// A block whose K/V the runner must copy from `src` to `dst` (every layer, K and V).
struct BlockCopy {
  BlockId src = kNullBlock;
  BlockId dst = kNullBlock;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

// A block copied between the device pool and the host tier (every layer, K and V).
struct HostCopy {
  bool to_host = true;  // device -> host (an evicted cached block); else host -> device (a hit)
  BlockId device = kNullBlock;
  HostBlockId host = kNoHostBlock;
  friend bool operator==(const HostCopy&, const HostCopy&) = default;
};

// Where one block of a cached prefix lives, for moving its K/V to another worker: in the pool
// (`device`) or else in the host tier (`host`).
struct KvBlockLocation {
  int index = 0;  // the block's position in its sequence
  BlockHash hash;
  BlockId device = kNullBlock;
  HostBlockId host = kNoHostBlock;
  friend bool operator==(const KvBlockLocation&, const KvBlockLocation&) = default;
};

struct KvCacheStats {
  int total_blocks = 0;      // usable blocks (null block excluded)
  int free_blocks = 0;       // ref count 0, evictable ones included
  int evictable_blocks = 0;  // free and still holding a cached prefix
  int used_blocks = 0;       // held by at least one sequence
  int cached_blocks = 0;     // in the prefix-cache index (used or free)
  int num_sequences = 0;
  int64_t prefix_query_tokens = 0;     // prompt tokens looked up by AddSequence
  int64_t prefix_hit_tokens = 0;       // of those, served from the cache (either tier)
  int64_t prefix_host_hit_tokens = 0;  // of those, copied back from the host tier
  int host_blocks = 0;                 // blocks of the host tier (0: none)
  int host_cached_blocks = 0;          // of those, holding a block
  int64_t host_stored_blocks = 0;      // copies device -> host so far
  int64_t host_loaded_blocks = 0;      // copies host -> device so far
  int64_t swapped_in_tokens = 0;       // tokens PreemptSequence kept and AddSequence restored
};

class KvCacheManager {
 public:
  // INVALID_ARGUMENT naming the field when the config is invalid.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(const KvCacheConfig& config);

  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  int block_size() const { return block_size_; }

  // The most blocks of `prompt` a prompt lookup may serve: the last token is always computed.
  static size_t MaxPromptBlocks(absl::Span<const TokenId> prompt, int block_size) {
    return prompt.empty() ? 0 : (prompt.size() - 1) / block_size;
  }
  uint64_t epoch() const { return epoch_; }

  // How much of `prompt` the cache holds, with `cache_salt` in block 0's extra keys. At most
  // (prompt.size() - 1) / block_size blocks (the last prompt token is always computed). No
  // side effects.
  PrefixMatch FindCachedPrefix(absl::Span<const TokenId> prompt, std::string_view cache_salt) const;

  // Starts sequence `id` with its prompt: attaches the cached prefix (as FindCachedPrefix) and
  // reserves slots for min(max_new_tokens, remaining prompt tokens) tokens after it. With
  // use_cached_prefix false nothing is attached (no device, host or swapped hit): every token is
  // computed, e.g. for a request that needs the logits of every prompt position; its full blocks
  // still enter the prefix cache once computed.
  // REQUIRES: prompt non-empty, max_new_tokens >= 1. ALREADY_EXISTS for a known id;
  // RESOURCE_EXHAUSTED (sequence not created, nothing changed) when the blocks do not fit.
  absl::StatusOr<SequenceStart> AddSequence(SequenceId id, absl::Span<const TokenId> prompt,
                                            std::string_view cache_salt, int max_new_tokens,
                                            bool use_cached_prefix = true);

  // Appends known tokens (e.g. the sampled one) to the sequence; reserves nothing.
  absl::Status AppendTokens(SequenceId id, absl::Span<const TokenId> tokens);

  // Makes the block table cover the next `num_new_tokens` tokens after the computed ones.
  // REQUIRES: num_computed + num_new_tokens <= known tokens (INVALID_ARGUMENT otherwise).
  // All or nothing (RESOURCE_EXHAUSTED).
  absl::Status AllocateSlots(SequenceId id, int num_new_tokens);

  // Marks `num_tokens` more tokens computed (their K/V are written). Blocks that become full
  // are hashed and enter the prefix cache (kStored events). FAILED_PRECONDITION when those
  // tokens have no slots or are not known.
  absl::Status CommitComputed(SequenceId id, int num_tokens);

  // Creates `dst` as a copy of `src` (parallel sampling): same tokens and computed count, full
  // blocks shared, the partial last computed block (if any) copied into a new block, returned
  // for the runner to copy. Uncomputed slots of `src` are not shared. All or nothing.
  absl::StatusOr<std::optional<BlockCopy>> ForkSequence(SequenceId src, SequenceId dst);

  // Frees the sequence's blocks, last block first, so that a chain's tail is evicted before its
  // head. NOT_FOUND when unknown or already freed.
  absl::Status FreeSequence(SequenceId id);
  // Preemption. Frees the sequence as FreeSequence does; with `swap` and a host tier, the K/V of
  // its partial last computed block is first copied (a recorded copy) into a host entry kept for
  // it, so that the next AddSequence(id, ...) whose cached prefix reaches that block restores
  // those tokens instead of recomputing them. Its full blocks need no such care: they stay cached
  // and reach the host tier when the pool hands them out, as every cached block does.
  absl::Status PreemptSequence(SequenceId id, bool swap);
  // Gives back what PreemptSequence kept for `id` (its request ended before it ran again).
  void DropSwapped(SequenceId id);

  bool HasSequence(SequenceId id) const { return slot_of_.contains(id); }
  // The sequence's block table; valid until the next non-const call.
  absl::StatusOr<absl::Span<const BlockId>> GetBlockTable(SequenceId id) const;
  absl::StatusOr<absl::Span<const TokenId>> GetTokens(SequenceId id) const;
  absl::StatusOr<int> GetNumComputedTokens(SequenceId id) const;
  // Fills slots[k] with the slot of position first_position + k. OUT_OF_RANGE when a position
  // has no block yet.
  absl::Status GetSlotMapping(SequenceId id, int first_position, absl::Span<int64_t> slots) const;

  KvCacheStats Stats() const;

  // KV block transfer between workers (docs/kv-cache.md). The holder locates the blocks, the
  // runner reads their K/V; the receiver imports them into its host tier, the runner writes their
  // K/V there, and the next AddSequence of a prompt with that prefix loads them like any host hit.
  //
  // The full blocks first_block .. first_block + max_blocks - 1 of `tokens` (cache_salt in
  // block 0) that this cache holds, in order, stopping at the first it does not (the chain from
  // block 0 must be cached, in the pool and then the host tier, as for a prefix hit). Unlike a
  // prompt lookup, the last full block counts too. No side effects.
  std::vector<KvBlockLocation> LocateBlocks(absl::Span<const TokenId> tokens,
                                            std::string_view cache_salt, int first_block,
                                            int max_blocks) const;
  // Enters the full blocks first_block .. first_block + num_blocks - 1 of `tokens` into the host
  // tier for K/V arriving from elsewhere: returns, per block in order, the host entry the caller
  // must write that block's K/V into before the next step, or kNoHostBlock when this cache
  // already holds the block (either tier: nothing to write). Stops early, returning fewer, when
  // the host tier is out of unpinned entries or would have to evict a block of this import.
  // Records kStored events (tier kHost) like an eviction to the host does.
  // FAILED_PRECONDITION without a host tier; INVALID_ARGUMENT when the range is not full blocks.
  absl::StatusOr<std::vector<HostBlockId>> ImportHostBlocks(absl::Span<const TokenId> tokens,
                                                            std::string_view cache_salt,
                                                            int first_block, int num_blocks);

  // Moves the host-tier copies recorded since the last call into `*copies` (cleared first),
  // in the order the runner must run them. Always empty without a host tier.
  void TakeHostCopies(std::vector<HostCopy>* copies);

  // Hands the events recorded since the last call to `*batch` (storage is reused).
  void DrainEvents(KvEventBatch* batch);
  // The cached hashes as of the last drained batch (pending events are not included).
  KvSnapshot Snapshot() const;

  // The pools, read-only: for tests, metrics and debugging. host_pool() is null without a
  // host tier.
  const BlockPool& pool() const { return pool_; }
  const HostBlockPool* host_pool() const { return host_.get(); }
  // OK when the pool's invariants hold and every block's ref count equals the number of block
  // tables that hold it. O(blocks + table entries); for tests and debug builds.
  absl::Status CheckInvariants() const;

 private:
  struct Sequence {
    std::string cache_salt;
    std::vector<TokenId> tokens;       // all known tokens
    std::vector<BlockId> block_table;  // [ceil(allocated tokens / block_size)]
    std::vector<BlockHash> hashes;     // hashes of the full computed blocks
    int num_computed_tokens = 0;
    BlockId chain_parent = kNullBlock;  // cached block chaining the last full block
    uint32_t chain_parent_generation = 0;
  };

  KvCacheManager(const KvCacheConfig& config);

  // Walks the cached prefix of `prompt`'s first max_blocks full blocks: calls
  // on_device(block, hash) per device hit, in order, then on_host(host_block, hash) per host-tier
  // hit that continues the chain.
  template <typename DeviceFn, typename HostFn>
  void MatchPrefix(absl::Span<const TokenId> prompt, std::string_view cache_salt, size_t max_blocks,
                   DeviceFn on_device, HostFn on_host) const;
  // pool_.Allocate, recording a copy to the host tier for each cached block it evicts.
  absl::Status AllocateBlocks(int n, std::vector<BlockId>* out);
  absl::StatusOr<Sequence*> Find(SequenceId id);
  absl::StatusOr<const Sequence*> Find(SequenceId id) const;
  Sequence& NewSequence(SequenceId id);
  void RecycleSequence(SequenceId id);
  int BlocksFor(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  void CacheFullBlocks(Sequence& seq);

  // A preempted sequence's partial last block, kept in the host tier (PreemptSequence), and
  // what it was computed for: the chain before it and its tokens.
  struct Swapped {
    HostBlockId host = kNoHostBlock;
    int block_index = 0;  // its position in the sequence
    BlockHash parent;     // the hash of the block before it (BlockHash{}: none)
    std::string cache_salt;
    std::vector<TokenId> tokens;  // its computed tokens, 1 .. block_size - 1
  };

  const int block_size_;
  const uint64_t epoch_;
  BlockPool pool_;
  std::unique_ptr<HostBlockPool> host_;               // null without a host tier
  std::vector<HostCopy> host_copies_;                 // recorded since the last TakeHostCopies
  absl::flat_hash_map<SequenceId, Swapped> swapped_;  // preempted by swap, not yet back
  std::vector<BlockId> evicted_;                      // scratch of AllocateBlocks
  std::vector<HostBlockId> host_hits_;                // scratch of AddSequence
  std::vector<KvEvent> host_events_;                  // scratch of DrainEvents
  std::vector<std::unique_ptr<Sequence>> sequences_;  // slab, reused; stable addresses
  std::vector<int> free_sequence_slots_;              // unused entries of sequences_
  absl::flat_hash_map<SequenceId, int> slot_of_;      // live sequence -> sequences_ index
  uint64_t last_sequence_number_ = 0;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
  int64_t prefix_host_hit_tokens_ = 0;
  int64_t swapped_in_tokens_ = 0;
  int64_t host_swap_loads_ = 0;
  int64_t host_stored_blocks_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_KV_CACHE_MANAGER_H_
