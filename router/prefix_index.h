// PrefixIndex: which workers hold which cached KV blocks, by block hash, for the whole cluster.
//
// One map from a block hash to the set of worker slots holding it (a fixed-size bitmask, so an
// entry costs 48 bytes however many workers hold the hash). Because block hashes are chained (a
// block's hash names its whole prefix), "the longest cached prefix of a prompt on worker w" is
// the number of leading prompt hashes w holds; MatchPrefix computes it for every worker in one
// walk over the prompt's hashes, intersecting holder masks, and stops as soon as no worker
// holds the next block: O(longest match + 1) lookups whatever the number of workers.
//
// Worker slots are small integers in [0, kMaxWorkers) handed out by the owner (ClusterBooks).
// Insert / Remove are idempotent, matching the worker's event stream, which reports each hash at
// most once while it is cached.
//
// Thread-safety: not thread-safe; the owner guards it (ClusterBooks::mu_).

#ifndef KVSERVE_ROUTER_PREFIX_INDEX_H_
#define KVSERVE_ROUTER_PREFIX_INDEX_H_

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "kvcache/block_hash.h"

namespace kvserve {

// A set of worker slots in [0, kMaxWorkers). Value type.
class WorkerMask {
 public:
  static constexpr int kMaxWorkers = 256;

  void Set(int slot) { words_[slot / 64] |= uint64_t{1} << (slot % 64); }
  void Clear(int slot) { words_[slot / 64] &= ~(uint64_t{1} << (slot % 64)); }
  bool Test(int slot) const { return (words_[slot / 64] >> (slot % 64)) & 1; }
  bool Empty() const;
  int Count() const;
  WorkerMask operator&(const WorkerMask& other) const;
  WorkerMask AndNot(const WorkerMask& other) const;  // this minus other
  // Calls fn(slot) for every member, in increasing order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (int w = 0; w < kWords; ++w) {
      for (uint64_t bits = words_[w]; bits != 0; bits &= bits - 1) {
        fn(w * 64 + std::countr_zero(bits));
      }
    }
  }

 private:
  static constexpr int kWords = kMaxWorkers / 64;
  std::array<uint64_t, kWords> words_{};
};

class PrefixIndex {
 public:
  PrefixIndex() = default;
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // Records that worker `slot` holds `hash`. Returns false when it already did.
  // REQUIRES: 0 <= slot < WorkerMask::kMaxWorkers (for all methods taking a slot).
  bool Insert(int slot, const BlockHash& hash);
  // Records that worker `slot` no longer holds `hash`. Returns false when it did not.
  bool Remove(int slot, const BlockHash& hash);
  // Forgets every hash of worker `slot` (a snapshot reset, a new epoch, all-cleared, a removed
  // worker). O(size()): it scans the whole index, which is cheaper in memory than a per-worker
  // set and fine for events that happen once per (re)connection.
  void ClearWorker(int slot);

  bool Holds(int slot, const BlockHash& hash) const;
  // Number of distinct hashes held by at least one worker.
  size_t size() const { return holders_.size(); }
  // Number of hashes worker `slot` holds (kept up to date by Insert / Remove / ClearWorker).
  int64_t CountFor(int slot) const { return count_[slot]; }

  // For every worker in `candidates`, the number of leading entries of `prompt_hashes` it holds,
  // written to (*matched_blocks)[slot] (the vector is resized to kMaxWorkers; entries of
  // non-candidates are 0). Returns the largest match.
  int MatchPrefix(absl::Span<const BlockHash> prompt_hashes, const WorkerMask& candidates,
                  std::vector<int>* matched_blocks) const;
  // The number of consecutive entries of `prompt_hashes` from index `from` that worker `slot`
  // holds (a host tier's continuation of a pool's match).
  int CountRun(int slot, absl::Span<const BlockHash> prompt_hashes, int from) const;

 private:
  absl::flat_hash_map<BlockHash, WorkerMask> holders_;  // never maps to an empty mask
  std::array<int64_t, WorkerMask::kMaxWorkers> count_{};
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_PREFIX_INDEX_H_
