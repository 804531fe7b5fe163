#include "tests/kvcache/kv_cache_harness.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kvcache/block_hash.h"

namespace kvserve {
namespace {

constexpr int kNumSequenceIds = 6;  // small, so unknown and duplicate ids come up often
constexpr int kNumTemplates = 3;
constexpr int kTemplateVocab = 50;
constexpr int kTailVocab = 4;  // tiny, so equal blocks appear across prompts
constexpr uint64_t kCommittedEpoch = 0x6b7663616368ULL;

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

absl::Status Violation(const std::string& what) { return absl::InternalError(what); }

#define HARNESS_RETURN_IF_ERROR(expr)         \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (0)

}  // namespace

class KvCacheHarness::Draw {
 public:
  explicit Draw(uint64_t seed) : state_(seed) {}
  int Below(int64_t n) { return n <= 0 ? 0 : static_cast<int>(SplitMix(state_) % n); }
  SequenceId Id() { return static_cast<SequenceId>(Below(kNumSequenceIds)); }
  uint64_t Next() { return SplitMix(state_); }

 private:
  uint64_t state_;
};

KvCacheHarness::KvCacheHarness(int num_blocks, int block_size, int num_host_blocks)
    : block_size_(block_size),
      kv_fingerprint_(static_cast<size_t>(num_blocks) * block_size, 0),
      kv_token_(static_cast<size_t>(num_blocks) * block_size, -1),
      written_hash_(num_blocks),
      host_fingerprint_(static_cast<size_t>(num_host_blocks) * block_size, 0),
      host_token_(static_cast<size_t>(num_host_blocks) * block_size, -1),
      host_written_hash_(num_host_blocks) {
  manager_ = *KvCacheManager::Create(KvCacheConfig{.num_blocks = num_blocks,
                                                   .block_size = block_size,
                                                   .epoch = kCommittedEpoch,
                                                   .num_host_blocks = num_host_blocks});
  uint64_t state = 42;
  for (int t = 0; t < kNumTemplates; ++t) {
    std::vector<TokenId> tokens(6 * block_size);
    for (TokenId& token : tokens) token = static_cast<TokenId>(SplitMix(state) % kTemplateVocab);
    templates_.push_back(std::move(tokens));
  }
}

SequenceId KvCacheHarness::PickId(Draw& draw) const {
  if (sequences_.empty() || draw.Below(4) == 0) return draw.Id();
  auto it = sequences_.begin();
  std::advance(it, draw.Below(sequences_.size()));
  return it->first;
}

std::vector<TokenId> KvCacheHarness::MakePrompt(Draw& draw) const {
  const std::vector<TokenId>& base = templates_[draw.Below(kNumTemplates)];
  std::vector<TokenId> prompt(base.begin(), base.begin() + draw.Below(base.size() + 1));
  const int tail = draw.Below(2 * block_size_ + 1);
  for (int i = 0; i < tail; ++i) prompt.push_back(draw.Below(kTailVocab));
  if (prompt.empty()) prompt.push_back(draw.Below(kTailVocab));
  return prompt;
}

std::vector<uint64_t> KvCacheHarness::Fingerprints(const ModelSequence& seq, int count) const {
  std::vector<uint64_t> fingerprints(count);
  uint64_t state = std::hash<std::string>{}(seq.salt);
  uint64_t fingerprint = SplitMix(state);
  for (int p = 0; p < count; ++p) {
    state = fingerprint ^ (static_cast<uint64_t>(seq.tokens[p]) * 0x100000001b3ULL);
    fingerprint = SplitMix(state);
    fingerprints[p] = fingerprint;
  }
  return fingerprints;
}

void KvCacheHarness::RunHostCopies() {
  manager_->TakeHostCopies(&host_copies_);
  for (const HostCopy& copy : host_copies_) {
    const int64_t device = int64_t{copy.device} * block_size_;
    const int64_t host = int64_t{copy.host} * block_size_;
    if (copy.to_host) {
      std::copy_n(kv_fingerprint_.begin() + device, block_size_, host_fingerprint_.begin() + host);
      std::copy_n(kv_token_.begin() + device, block_size_, host_token_.begin() + host);
      host_written_hash_[copy.host] = written_hash_[copy.device];
    } else {
      std::copy_n(host_fingerprint_.begin() + host, block_size_, kv_fingerprint_.begin() + device);
      std::copy_n(host_token_.begin() + host, block_size_, kv_token_.begin() + device);
      written_hash_[copy.device] = host_written_hash_[copy.host];
    }
  }
}

int KvCacheHarness::FreeBlocksNeeded(const ModelSequence& seq, int end_tokens) const {
  const int blocks = (end_tokens + block_size_ - 1) / block_size_;
  return std::max(0, blocks - static_cast<int>(seq.table.size()));
}

absl::Status KvCacheHarness::ExpectCode(const absl::Status& status, absl::StatusCode code,
                                        const char* what) {
  if (status.code() != code) {
    return Violation(absl::StrCat(what, ": expected ", absl::StatusCodeToString(code), ", got ",
                                  status.ToString()));
  }
  if (code != absl::StatusCode::kOk) ++counters_.expected_errors;
  return absl::OkStatus();
}

// After a failed call: capacity is as before and the sequence's table is the model's.
absl::Status KvCacheHarness::CheckUnchanged(const KvCacheStats& before, SequenceId id) {
  const KvCacheStats after = manager_->Stats();
  if (after.free_blocks != before.free_blocks ||
      after.evictable_blocks != before.evictable_blocks ||
      after.cached_blocks != before.cached_blocks || after.num_sequences != before.num_sequences) {
    return Violation(absl::StrCat("failed call on sequence ", id, " changed the pool"));
  }
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    if (manager_->HasSequence(id)) return Violation(absl::StrCat("failed call created ", id));
    return absl::OkStatus();
  }
  absl::StatusOr<absl::Span<const BlockId>> table = manager_->GetBlockTable(id);
  if (!table.ok() ||
      !std::equal(table->begin(), table->end(), it->second.table.begin(), it->second.table.end())) {
    return Violation(absl::StrCat("failed call changed the block table of ", id));
  }
  return absl::OkStatus();
}

absl::Status KvCacheHarness::Add(Draw& draw) {
  const SequenceId id = draw.Id();
  const std::vector<TokenId> prompt = MakePrompt(draw);
  const std::string salt = draw.Below(4) == 0 ? "tenant-b" : "";
  const int budget = 1 + draw.Below(prompt.size() + block_size_);
  const KvCacheStats before = manager_->Stats();
  if (sequences_.contains(id)) {
    HARNESS_RETURN_IF_ERROR(ExpectCode(manager_->AddSequence(id, prompt, salt, budget).status(),
                                       absl::StatusCode::kAlreadyExists, "AddSequence duplicate"));
    return CheckUnchanged(before, id);
  }
  const PrefixMatch match = manager_->FindCachedPrefix(prompt, salt);
  const int cached = match.num_tokens;
  if (cached % block_size_ != 0 || cached > static_cast<int>(prompt.size()) - 1 ||
      match.num_blocks * block_size_ != cached) {
    return Violation(absl::StrCat("bad prefix match of ", cached, " tokens"));
  }
  const int num_new = std::min<int>(budget, prompt.size() - cached);
  // Host-tier hits need fresh blocks to be copied into, like new tokens.
  const int needed = (cached + num_new + block_size_ - 1) / block_size_ -
                     (match.num_blocks - match.num_host_blocks) + match.num_evictable_blocks;
  absl::StatusOr<SequenceStart> start = manager_->AddSequence(id, prompt, salt, budget);
  if (needed > before.free_blocks) {
    ++counters_.resource_exhausted;
    HARNESS_RETURN_IF_ERROR(
        ExpectCode(start.status(), absl::StatusCode::kResourceExhausted, "AddSequence full"));
    return CheckUnchanged(before, id);
  }
  HARNESS_RETURN_IF_ERROR(ExpectCode(start.status(), absl::StatusCode::kOk, "AddSequence"));
  if (start->num_cached_tokens != cached || start->num_new_tokens != num_new) {
    return Violation(absl::StrCat("AddSequence returned ", start->num_cached_tokens, "+",
                                  start->num_new_tokens, ", lookup said ", cached, "+", num_new));
  }
  if (manager_->Stats().free_blocks != before.free_blocks - needed) {
    return Violation("AddSequence took a different number of free blocks than needed");
  }
  absl::Span<const BlockId> table = *manager_->GetBlockTable(id);
  ModelSequence& seq = sequences_[id];
  seq.tokens = prompt;
  seq.salt = salt;
  seq.computed = cached;
  seq.table.assign(table.begin(), table.end());
  if (static_cast<int>(seq.table.size()) != (cached + num_new + block_size_ - 1) / block_size_) {
    return Violation("AddSequence block table has the wrong length");
  }
  ++counters_.sequences_added;
  counters_.prefix_hit_tokens += cached;
  counters_.host_hit_tokens += start->num_host_tokens;
  return absl::OkStatus();
}

absl::Status KvCacheHarness::Append(Draw& draw) {
  const SequenceId id = PickId(draw);
  std::vector<TokenId> tokens(1 + draw.Below(3));
  for (TokenId& token : tokens) token = draw.Below(kTailVocab);
  auto it = sequences_.find(id);
  const absl::Status status = manager_->AppendTokens(id, tokens);
  if (it == sequences_.end()) {
    return ExpectCode(status, absl::StatusCode::kNotFound, "AppendTokens unknown");
  }
  HARNESS_RETURN_IF_ERROR(ExpectCode(status, absl::StatusCode::kOk, "AppendTokens"));
  it->second.tokens.insert(it->second.tokens.end(), tokens.begin(), tokens.end());
  return absl::OkStatus();
}

absl::Status KvCacheHarness::Allocate(Draw& draw) {
  const SequenceId id = PickId(draw);
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    return ExpectCode(manager_->AllocateSlots(id, 1), absl::StatusCode::kNotFound,
                      "AllocateSlots unknown");
  }
  ModelSequence& seq = it->second;
  const int known_left = static_cast<int>(seq.tokens.size()) - seq.computed;
  const int num_new = draw.Below(known_left + 2);
  const KvCacheStats before = manager_->Stats();
  const absl::Status status = manager_->AllocateSlots(id, num_new);
  if (num_new > known_left) {
    HARNESS_RETURN_IF_ERROR(
        ExpectCode(status, absl::StatusCode::kInvalidArgument, "AllocateSlots past known"));
    return CheckUnchanged(before, id);
  }
  if (FreeBlocksNeeded(seq, seq.computed + num_new) > before.free_blocks) {
    ++counters_.resource_exhausted;
    HARNESS_RETURN_IF_ERROR(
        ExpectCode(status, absl::StatusCode::kResourceExhausted, "AllocateSlots full"));
    return CheckUnchanged(before, id);
  }
  HARNESS_RETURN_IF_ERROR(ExpectCode(status, absl::StatusCode::kOk, "AllocateSlots"));
  absl::Span<const BlockId> table = *manager_->GetBlockTable(id);
  if (table.size() < seq.table.size() ||
      !std::equal(seq.table.begin(), seq.table.end(), table.begin())) {
    return Violation(absl::StrCat("AllocateSlots rewrote the block table of ", id));
  }
  seq.table.assign(table.begin(), table.end());
  return absl::OkStatus();
}

absl::Status KvCacheHarness::Commit(SequenceId id, int num_tokens) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) {
    return ExpectCode(manager_->CommitComputed(id, num_tokens), absl::StatusCode::kNotFound,
                      "CommitComputed unknown");
  }
  ModelSequence& seq = it->second;
  const int limit = std::min<int>(seq.table.size() * block_size_, seq.tokens.size());
  const KvCacheStats before = manager_->Stats();
  if (seq.computed + num_tokens > limit) {
    HARNESS_RETURN_IF_ERROR(ExpectCode(manager_->CommitComputed(id, num_tokens),
                                       absl::StatusCode::kFailedPrecondition,
                                       "CommitComputed past slots"));
    return CheckUnchanged(before, id);
  }
  // The runner runs the step's host copies, writes the K/V of the new positions into their
  // slots, then commits.
  RunHostCopies();
  std::vector<int64_t> slots(num_tokens);
  const std::vector<uint64_t> fingerprints = Fingerprints(seq, seq.computed + num_tokens);
  HARNESS_RETURN_IF_ERROR(manager_->GetSlotMapping(id, seq.computed, absl::MakeSpan(slots)));
  for (int k = 0; k < num_tokens; ++k) {
    const int position = seq.computed + k;
    const int64_t expected =
        int64_t{seq.table[position / block_size_]} * block_size_ + position % block_size_;
    if (slots[k] != expected) return Violation("slot mapping disagrees with the block table");
    kv_fingerprint_[slots[k]] = fingerprints[position];
    kv_token_[slots[k]] = seq.tokens[position];
  }
  HARNESS_RETURN_IF_ERROR(
      ExpectCode(manager_->CommitComputed(id, num_tokens), absl::StatusCode::kOk, "Commit"));
  const int old_full = seq.computed / block_size_;
  seq.computed += num_tokens;
  const int new_full = seq.computed / block_size_;
  if (new_full > old_full) {
    std::vector<BlockHash> hashes;
    HashFullBlocks(absl::MakeConstSpan(seq.tokens).first(new_full * block_size_), block_size_,
                   seq.salt, &hashes);
    for (int i = old_full; i < new_full; ++i) written_hash_[seq.table[i]] = hashes[i];
  }
  return absl::OkStatus();
}

absl::Status KvCacheHarness::CommitOp(Draw& draw) {
  const SequenceId id = PickId(draw);
  auto it = sequences_.find(id);
  int range = 1;
  if (it != sequences_.end()) {
    const ModelSequence& seq = it->second;
    range = std::min<int>(seq.table.size() * block_size_, seq.tokens.size()) - seq.computed;
  }
  return Commit(id, draw.Below(range + 2));
}

// One engine step for a sequence: sample a token when all are computed, reserve slots for a
// chunk of the rest, and commit it.
absl::Status KvCacheHarness::Step(Draw& draw) {
  const SequenceId id = PickId(draw);
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return Append(draw);
  ModelSequence& seq = it->second;
  if (seq.computed == static_cast<int>(seq.tokens.size())) {
    const TokenId sampled = draw.Below(kTailVocab);
    HARNESS_RETURN_IF_ERROR(manager_->AppendTokens(id, {sampled}));
    seq.tokens.push_back(sampled);
  }
  const int chunk =
      std::min<int>(seq.tokens.size() - seq.computed, 1 + draw.Below(2 * block_size_));
  const KvCacheStats before = manager_->Stats();
  const absl::Status status = manager_->AllocateSlots(id, chunk);
  if (FreeBlocksNeeded(seq, seq.computed + chunk) > before.free_blocks) {
    ++counters_.resource_exhausted;
    HARNESS_RETURN_IF_ERROR(
        ExpectCode(status, absl::StatusCode::kResourceExhausted, "step AllocateSlots full"));
    return CheckUnchanged(before, id);
  }
  HARNESS_RETURN_IF_ERROR(ExpectCode(status, absl::StatusCode::kOk, "step AllocateSlots"));
  absl::Span<const BlockId> table = *manager_->GetBlockTable(id);
  seq.table.assign(table.begin(), table.end());
  return Commit(id, chunk);
}

absl::Status KvCacheHarness::Fork(Draw& draw) {
  const SequenceId src = PickId(draw);
  const SequenceId dst = draw.Id();
  const KvCacheStats before = manager_->Stats();
  absl::StatusOr<std::optional<BlockCopy>> copy = manager_->ForkSequence(src, dst);
  auto it = sequences_.find(src);
  if (it == sequences_.end()) {
    HARNESS_RETURN_IF_ERROR(
        ExpectCode(copy.status(), absl::StatusCode::kNotFound, "ForkSequence unknown src"));
    return CheckUnchanged(before, dst);
  }
  if (sequences_.contains(dst)) {
    HARNESS_RETURN_IF_ERROR(
        ExpectCode(copy.status(), absl::StatusCode::kAlreadyExists, "ForkSequence existing dst"));
    return CheckUnchanged(before, dst);
  }
  const ModelSequence& from = it->second;
  const int full = from.computed / block_size_;
  const bool partial = from.computed % block_size_ != 0;
  if (partial && before.free_blocks == 0) {
    ++counters_.resource_exhausted;
    HARNESS_RETURN_IF_ERROR(
        ExpectCode(copy.status(), absl::StatusCode::kResourceExhausted, "ForkSequence full"));
    return CheckUnchanged(before, dst);
  }
  HARNESS_RETURN_IF_ERROR(ExpectCode(copy.status(), absl::StatusCode::kOk, "ForkSequence"));
  absl::Span<const BlockId> table = *manager_->GetBlockTable(dst);
  if (static_cast<int>(table.size()) != full + (partial ? 1 : 0) ||
      !std::equal(table.begin(), table.begin() + full, from.table.begin()) ||
      copy->has_value() != partial) {
    return Violation("ForkSequence: wrong block table or copy");
  }
  if (partial) {
    RunHostCopies();  // the fork's new block may have evicted a cached one to the host
    const BlockCopy& c = **copy;
    if (c.src != from.table[full] || c.dst != table[full]) return Violation("wrong fork copy");
    std::copy_n(kv_fingerprint_.begin() + int64_t{c.src} * block_size_, block_size_,
                kv_fingerprint_.begin() + int64_t{c.dst} * block_size_);
    std::copy_n(kv_token_.begin() + int64_t{c.src} * block_size_, block_size_,
                kv_token_.begin() + int64_t{c.dst} * block_size_);
    ++counters_.fork_copies;
  }
  ModelSequence child = from;
  child.table.assign(table.begin(), table.end());
  sequences_[dst] = std::move(child);
  return absl::OkStatus();
}

absl::Status KvCacheHarness::Free(Draw& draw) {
  const SequenceId id = PickId(draw);
  const absl::Status status = manager_->FreeSequence(id);
  if (sequences_.erase(id) == 0) {
    return ExpectCode(status, absl::StatusCode::kNotFound, "FreeSequence unknown");
  }
  return ExpectCode(status, absl::StatusCode::kOk, "FreeSequence");
}

absl::Status KvCacheHarness::Import(Draw& draw) {
  // The engine imports between steps, when every recorded copy has run.
  RunHostCopies();
  const std::vector<TokenId> prompt = MakePrompt(draw);
  const std::string salt = draw.Below(4) == 0 ? "tenant-b" : "";
  const int full = static_cast<int>(prompt.size()) / block_size_;
  if (full == 0) return absl::OkStatus();
  const int first = draw.Below(full);
  const int count = 1 + draw.Below(full - first);
  absl::StatusOr<std::vector<HostBlockId>> entries =
      manager_->ImportHostBlocks(prompt, salt, first, count);
  if (host_fingerprint_.empty()) {
    return ExpectCode(entries.status(), absl::StatusCode::kFailedPrecondition,
                      "ImportHostBlocks without a host tier");
  }
  HARNESS_RETURN_IF_ERROR(ExpectCode(entries.status(), absl::StatusCode::kOk, "ImportHostBlocks"));
  if (static_cast<int>(entries->size()) > count) {
    return Violation("ImportHostBlocks returned more entries than blocks");
  }
  ModelSequence arriving;
  arriving.tokens = prompt;
  arriving.salt = salt;
  const std::vector<uint64_t> fingerprints = Fingerprints(arriving, full * block_size_);
  std::vector<BlockHash> hashes;
  HashFullBlocks(prompt, block_size_, salt, &hashes);
  for (size_t j = 0; j < entries->size(); ++j) {
    const HostBlockId host = (*entries)[j];
    if (host == kNoHostBlock) continue;
    const int64_t from = int64_t{first + static_cast<int>(j)} * block_size_;
    std::copy_n(fingerprints.begin() + from, block_size_,
                host_fingerprint_.begin() + int64_t{host} * block_size_);
    std::copy_n(prompt.begin() + from, block_size_,
                host_token_.begin() + int64_t{host} * block_size_);
    host_written_hash_[host] = hashes[first + j];
    ++counters_.imported_blocks;
  }
  return absl::OkStatus();
}

absl::Status KvCacheHarness::Lookup(Draw& draw) {
  const std::vector<TokenId> prompt = MakePrompt(draw);
  const KvCacheStats before = manager_->Stats();
  const PrefixMatch first = manager_->FindCachedPrefix(prompt, "");
  const PrefixMatch second = manager_->FindCachedPrefix(prompt, "");
  if (first.num_tokens != second.num_tokens ||
      first.num_tokens > static_cast<int>(prompt.size()) - 1 ||
      first.num_evictable_blocks > first.num_blocks) {
    return Violation("FindCachedPrefix is not a pure, bounded query");
  }
  return CheckUnchanged(before, kNumSequenceIds);
}

absl::Status KvCacheHarness::DrainAndSnapshot(Draw& draw) {
  if (draw.Below(2) == 0) {
    const KvSnapshot snapshot = manager_->Snapshot();
    const absl::flat_hash_set<BlockHash> hashes(snapshot.hashes.begin(), snapshot.hashes.end());
    if (hashes != event_mirror_ || hashes.size() != snapshot.hashes.size()) {
      return Violation("snapshot disagrees with the events drained so far");
    }
    const absl::flat_hash_set<BlockHash> host_hashes(snapshot.host_hashes.begin(),
                                                     snapshot.host_hashes.end());
    if (host_hashes != host_event_mirror_ || host_hashes.size() != snapshot.host_hashes.size()) {
      return Violation("snapshot's host tier disagrees with the events drained so far");
    }
  }
  const uint64_t previous = manager_->Snapshot().sequence_number;
  KvEventBatch batch;
  manager_->DrainEvents(&batch);
  if (batch.epoch != kCommittedEpoch) return Violation("wrong epoch");
  if (batch.sequence_number != (batch.events.empty() ? 0 : previous + 1)) {
    return Violation("event batches are not numbered consecutively");
  }
  for (const KvEvent& event : batch.events) {
    absl::flat_hash_set<BlockHash>& mirror =
        event.tier == KvTier::kDevice ? event_mirror_ : host_event_mirror_;
    if (event.kind == KvEventKind::kStored) {
      if (!mirror.insert(event.hash).second) return Violation("stored twice");
    } else {
      counters_.evictions += event.tier == KvTier::kDevice;
      if (mirror.erase(event.hash) == 0) return Violation("removed an unknown hash");
    }
  }
  absl::flat_hash_set<BlockHash> cached;
  manager_->pool().ForEachCachedBlock(
      [&](BlockId block) { cached.insert(manager_->pool().hash(block)); });
  if (cached != event_mirror_) return Violation("events do not reproduce the index");
  return absl::OkStatus();
}

absl::Status KvCacheHarness::CheckAll() {
  RunHostCopies();  // what the next step's runner does before reading anything
  HARNESS_RETURN_IF_ERROR(manager_->CheckInvariants());
  const BlockPool& pool = manager_->pool();
  const KvCacheStats stats = manager_->Stats();
  if (stats.free_blocks + stats.used_blocks != stats.total_blocks ||
      stats.total_blocks != pool.num_blocks() - 1 ||
      stats.num_sequences != static_cast<int>(sequences_.size())) {
    return Violation("capacity stats do not add up");
  }
  std::vector<int> holders(pool.num_blocks(), 0);
  for (const auto& [id, seq] : sequences_) {
    for (BlockId block : seq.table) ++holders[block];
  }
  int used = 0;
  for (BlockId block = 1; block < pool.num_blocks(); ++block) {
    if (pool.ref_count(block) != holders[block]) {
      return Violation(absl::StrCat("block ", block, " ref count ", pool.ref_count(block), " vs ",
                                    holders[block], " holders"));
    }
    used += holders[block] > 0;
  }
  if (used != stats.used_blocks) return Violation("used blocks != blocks held by tables");
  for (SequenceId id = 0; id < kNumSequenceIds; ++id) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) {
      if (manager_->HasSequence(id)) return Violation(absl::StrCat("stray sequence ", id));
      continue;
    }
    const ModelSequence& seq = it->second;
    absl::Span<const BlockId> table = *manager_->GetBlockTable(id);
    absl::Span<const TokenId> tokens = *manager_->GetTokens(id);
    if (!std::equal(table.begin(), table.end(), seq.table.begin(), seq.table.end()) ||
        !std::equal(tokens.begin(), tokens.end(), seq.tokens.begin(), seq.tokens.end()) ||
        *manager_->GetNumComputedTokens(id) != seq.computed) {
      return Violation(absl::StrCat("sequence ", id, " differs from the model"));
    }
    const std::vector<uint64_t> fingerprints = Fingerprints(seq, seq.computed);
    for (int p = 0; p < seq.computed; ++p) {
      const int64_t slot = int64_t{seq.table[p / block_size_]} * block_size_ + p % block_size_;
      if (kv_fingerprint_[slot] != fingerprints[p]) {
        return Violation(absl::StrCat("sequence ", id, " position ", p, " reads wrong K/V"));
      }
    }
  }
  for (BlockId block = 1; block < pool.num_blocks(); ++block) {
    if (!pool.is_cached(block)) continue;
    absl::Span<const TokenId> stored = pool.tokens(block);
    if (!std::equal(stored.begin(), stored.end(),
                    kv_token_.begin() + int64_t{block} * block_size_) ||
        pool.hash(block) != written_hash_[block]) {
      return Violation(absl::StrCat("cached block ", block, " does not match its K/V"));
    }
  }
  return absl::OkStatus();
}

absl::Status KvCacheHarness::Apply(int kind, uint64_t entropy) {
  Draw draw(entropy);
  ++counters_.operations;
  absl::Status status;
  // Weighted towards the engine's common path: admit, step, fork, free.
  switch (kind % kNumOperationKinds) {
    case 0:
    case 1:
    case 2:
      status = Add(draw);
      break;
    case 3:
      status = Append(draw);
      break;
    case 4:
      status = Allocate(draw);
      break;
    case 5:
      status = CommitOp(draw);
      break;
    case 6:
    case 7:
    case 8:
    case 9:
      status = Step(draw);
      break;
    case 10:
    case 11:
      status = Fork(draw);
      break;
    case 12:
    case 13:
      status = Free(draw);
      break;
    case 14:
      status = draw.Below(2) == 0 ? Lookup(draw) : Import(draw);
      break;
    default:
      status = DrainAndSnapshot(draw);
      break;
  }
  HARNESS_RETURN_IF_ERROR(status);
  return CheckAll();
}

}  // namespace kvserve
