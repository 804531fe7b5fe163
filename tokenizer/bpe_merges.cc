#include "tokenizer/bpe_merges.h"

#include <queue>

namespace kvserve {
namespace {

// A merge that was possible when queued; it is stale when either symbol changed since.
struct Candidate {
  int32_t rank;
  int32_t left;     // position of the left symbol
  int32_t left_id;  // ids when queued, to detect stale candidates
  int32_t right_id;
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : left > other.left;
  }
};

}  // namespace

void BpeMerges::Add(int32_t left, int32_t right, int32_t merged, int32_t rank) {
  auto [it, inserted] = merges_.try_emplace(Key(left, right), Merge{rank, merged});
  if (!inserted && rank < it->second.rank) it->second = Merge{rank, merged};
}

const BpeMerges::Merge* BpeMerges::Find(int32_t left, int32_t right) const {
  auto it = merges_.find(Key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeMerges::Apply(std::vector<int32_t>* ids) const {
  const int32_t n = static_cast<int32_t>(ids->size());
  if (n < 2) return;
  std::vector<int32_t>& id = *ids;        // [n], symbol ids; -1 once merged into its left
  std::vector<int32_t> next(n), prev(n);  // [n], linked list of live symbols (-1 = none)
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push = [&](int32_t left, int32_t right) {
    if (const Merge* m = Find(id[left], id[right])) {
      queue.push(Candidate{m->rank, left, id[left], id[right]});
    }
  };
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t right = next[c.left];
    if (id[c.left] != c.left_id || right < 0 || id[right] != c.right_id) continue;  // stale
    id[c.left] = Find(c.left_id, c.right_id)->merged;
    id[right] = -1;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    if (prev[c.left] >= 0) push(prev[c.left], c.left);
    if (next[c.left] >= 0) push(c.left, next[c.left]);
  }
  int32_t out = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (id[i] >= 0) id[out++] = id[i];
  }
  ids->resize(out);
}

}  // namespace kvserve
