// KvCacheHarness: drives a KvCacheManager with random operations and checks it against a
// simple reference model after every operation. Shared by the property test and the fuzzer.
//
// The model keeps, independently of the manager: each sequence's tokens, computed count and
// block table (checked append-only), and a fake K/V pool: for every slot, a fingerprint of the
// exact token prefix (and cache salt) whose K/V the "runner" wrote there. After every operation
// it checks that
//   - the manager's own invariants hold (KvCacheManager::CheckInvariants);
//   - free + used = total, and every ref count equals the number of model tables holding it;
//   - every computed position of every live sequence reads K/V computed for its own prefix, so
//     no prefix hit, fork or eviction ever served wrong K/V;
//   - every cached block stores the tokens whose K/V it holds and the hash of their prefix;
//   - a failed allocation changed nothing and failed only when the blocks really did not fit;
//   - the event stream, applied to a mirror per tier, reproduces each index; snapshots agree.
// With a host tier the model keeps a fake host memory too, and runs the manager's host copies
// (TakeHostCopies) in their order wherever a runner would: before "computing" (writing slots),
// before a fork's block copy, and before the checks, so the K/V check above covers every prefix
// brought back from the host tier.
//
// Thread-safety: not thread-safe.

#ifndef KVSERVE_TESTS_KVCACHE_KV_CACHE_HARNESS_H_
#define KVSERVE_TESTS_KVCACHE_KV_CACHE_HARNESS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "kvcache/kv_cache_manager.h"

namespace kvserve {

struct HarnessCounters {
  int64_t operations = 0;
  int64_t sequences_added = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t evictions = 0;  // kRemoved events
  int64_t resource_exhausted = 0;
  int64_t fork_copies = 0;
  int64_t expected_errors = 0;  // misuse answered with the right error
  int64_t host_hit_tokens = 0;  // of prefix_hit_tokens, copied back from the host tier
  int64_t imported_blocks = 0;  // written into the host tier by Import
};

class KvCacheHarness {
 public:
  static constexpr int kNumOperationKinds = 16;

  // REQUIRES: num_blocks >= 2, block_size a valid block size, num_host_blocks >= 0 (0: no
  // host tier).
  KvCacheHarness(int num_blocks, int block_size, int num_host_blocks = 0);

  // Applies operation `kind % kNumOperationKinds`, its arguments drawn from `entropy`, then checks
  // every invariant. Returns the first violation (INTERNAL with a description), else OK.
  absl::Status Apply(int kind, uint64_t entropy);

  const HarnessCounters& counters() const { return counters_; }

 private:
  struct ModelSequence {
    std::vector<TokenId> tokens;
    std::string salt;
    int computed = 0;
    std::vector<BlockId> table;
  };
  class Draw;

  // A sequence id: usually a live one, sometimes any id of the small id space.
  SequenceId PickId(Draw& draw) const;

  absl::Status Add(Draw& draw);
  absl::Status Append(Draw& draw);
  absl::Status Allocate(Draw& draw);
  absl::Status Commit(SequenceId id, int num_tokens);
  absl::Status CommitOp(Draw& draw);
  absl::Status Step(Draw& draw);
  absl::Status Fork(Draw& draw);
  absl::Status Free(Draw& draw);
  absl::Status Lookup(Draw& draw);
  absl::Status DrainAndSnapshot(Draw& draw);
  absl::Status CheckAll();
  absl::Status CheckUnchanged(const KvCacheStats& before, SequenceId id);
  absl::Status ExpectCode(const absl::Status& status, absl::StatusCode code, const char* what);

  std::vector<TokenId> MakePrompt(Draw& draw) const;
  // KV block transfer: blocks of a random prompt arrive from "another worker" (ImportHostBlocks)
  // and their fake K/V is written into the entries it returns.
  absl::Status Import(Draw& draw);
  // Fake K/V of positions [0, count): each depends on the salt and every token up to it.
  std::vector<uint64_t> Fingerprints(const ModelSequence& seq, int count) const;
  int FreeBlocksNeeded(const ModelSequence& seq, int end_tokens) const;
  // Runs the host copies recorded so far on the fake K/V, in order.
  void RunHostCopies();

  const int block_size_;
  std::unique_ptr<KvCacheManager> manager_;
  std::map<SequenceId, ModelSequence> sequences_;
  std::vector<uint64_t> kv_fingerprint_;      // [num_blocks * block_size] fake K/V per slot
  std::vector<TokenId> kv_token_;             // [num_blocks * block_size] token written per slot
  std::vector<BlockHash> written_hash_;       // [num_blocks] prefix hash of a block's K/V when full
  std::vector<uint64_t> host_fingerprint_;    // [num_host_blocks * block_size]
  std::vector<TokenId> host_token_;           // [num_host_blocks * block_size]
  std::vector<BlockHash> host_written_hash_;  // [num_host_blocks]
  std::vector<HostCopy> host_copies_;         // scratch of RunHostCopies
  absl::flat_hash_set<BlockHash> event_mirror_;
  absl::flat_hash_set<BlockHash> host_event_mirror_;
  std::vector<std::vector<TokenId>> templates_;  // shared prompt prefixes
  HarnessCounters counters_;
};

}  // namespace kvserve

#endif  // KVSERVE_TESTS_KVCACHE_KV_CACHE_HARNESS_H_
