// BpeMerges: the merge table of a BPE vocabulary and the merge loop over one word. A merge turns
// the adjacent pair (left id, right id) into one id; among all pairs present in the word the one
// with the lowest rank merges first, the leftmost on a tie, until no pair has a merge. Ranks come
// from the file's merge list (byte-level BPE, tokenizer.json) or from token scores (GGUF
// SentencePiece: higher score = lower rank, equal scores share a rank).
//
// Thread-safety: Add() only while building; Apply() is const and may run concurrently.
#ifndef KVSERVE_TOKENIZER_BPE_MERGES_H_
#define KVSERVE_TOKENIZER_BPE_MERGES_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvserve {

class BpeMerges {
 public:
  // Adds the merge left + right -> merged at `rank`. A pair added twice keeps the lower rank.
  void Add(int32_t left, int32_t right, int32_t merged, int32_t rank);

  // Merges the symbols of one word in place: *ids on entry are its initial symbols (one per
  // character or byte), on return its tokens.
  void Apply(std::vector<int32_t>* ids) const;

  size_t size() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  const Merge* Find(int32_t left, int32_t right) const;

  absl::flat_hash_map<uint64_t, Merge> merges_;  // Key(left, right) -> merge
};

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_BPE_MERGES_H_
