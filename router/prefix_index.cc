#include "router/prefix_index.h"

#include <algorithm>

namespace kvserve {

bool WorkerMask::Empty() const {
  for (uint64_t word : words_) {
    if (word != 0) return false;
  }
  return true;
}

int WorkerMask::Count() const {
  int count = 0;
  for (uint64_t word : words_) count += std::popcount(word);
  return count;
}

WorkerMask WorkerMask::operator&(const WorkerMask& other) const {
  WorkerMask result;
  for (int w = 0; w < kWords; ++w) result.words_[w] = words_[w] & other.words_[w];
  return result;
}

WorkerMask WorkerMask::AndNot(const WorkerMask& other) const {
  WorkerMask result;
  for (int w = 0; w < kWords; ++w) result.words_[w] = words_[w] & ~other.words_[w];
  return result;
}

bool PrefixIndex::Insert(int slot, const BlockHash& hash) {
  WorkerMask& mask = holders_[hash];
  if (mask.Test(slot)) return false;
  mask.Set(slot);
  ++count_[slot];
  return true;
}

bool PrefixIndex::Remove(int slot, const BlockHash& hash) {
  auto it = holders_.find(hash);
  if (it == holders_.end() || !it->second.Test(slot)) return false;
  it->second.Clear(slot);
  if (it->second.Empty()) holders_.erase(it);
  --count_[slot];
  return true;
}

void PrefixIndex::ClearWorker(int slot) {
  if (count_[slot] == 0) return;
  absl::erase_if(holders_, [slot](auto& entry) {
    entry.second.Clear(slot);
    return entry.second.Empty();
  });
  count_[slot] = 0;
}

bool PrefixIndex::Holds(int slot, const BlockHash& hash) const {
  auto it = holders_.find(hash);
  return it != holders_.end() && it->second.Test(slot);
}

int PrefixIndex::MatchPrefix(absl::Span<const BlockHash> prompt_hashes,
                             const WorkerMask& candidates, std::vector<int>* matched_blocks) const {
  matched_blocks->assign(WorkerMask::kMaxWorkers, 0);
  // `alive`: candidates holding every block so far. A worker leaving it at block i matched i.
  WorkerMask alive = candidates;
  int depth = 0;
  for (; depth < static_cast<int>(prompt_hashes.size()) && !alive.Empty(); ++depth) {
    auto it = holders_.find(prompt_hashes[depth]);
    if (it == holders_.end()) break;
    const WorkerMask next = alive & it->second;
    alive.AndNot(next).ForEach([&](int slot) { (*matched_blocks)[slot] = depth; });
    alive = next;
  }
  alive.ForEach([&](int slot) { (*matched_blocks)[slot] = depth; });
  int longest = 0;
  candidates.ForEach([&](int slot) { longest = std::max(longest, (*matched_blocks)[slot]); });
  return longest;
}

int PrefixIndex::CountRun(int slot, absl::Span<const BlockHash> prompt_hashes, int from) const {
  int count = 0;
  for (size_t i = static_cast<size_t>(from); i < prompt_hashes.size(); ++i, ++count) {
    if (!Holds(slot, prompt_hashes[i])) break;
  }
  return count;
}

}  // namespace kvserve
