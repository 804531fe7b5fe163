#include "kvcache/kv_cache_manager.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kvcache/kv_layout.h"

namespace kvserve {
namespace {

uint64_t EpochOrRandom(uint64_t epoch) {
  absl::BitGen gen;
  while (epoch == 0) epoch = absl::Uniform<uint64_t>(gen);
  return epoch;
}

absl::Status UnknownSequence(SequenceId id) {
  return absl::NotFoundError(absl::StrCat("unknown sequence ", id, " (never added or freed)"));
}

}  // namespace

absl::Status KvCacheConfig::Validate() const {
  if (num_blocks < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_blocks must be >= 2 (block 0 is the reserved null block), got ", num_blocks));
  }
  if (num_host_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_host_blocks must be >= 0, got ", num_host_blocks));
  }
  return ValidateBlockSize(block_size);
}

absl::StatusOr<std::unique_ptr<KvCacheManager>> KvCacheManager::Create(
    const KvCacheConfig& config) {
  KVSERVE_RETURN_IF_ERROR(config.Validate());
  return std::unique_ptr<KvCacheManager>(new KvCacheManager(config));
}

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : block_size_(config.block_size),
      epoch_(EpochOrRandom(config.epoch)),
      pool_(config.num_blocks, config.block_size, config.num_host_blocks > 0),
      host_(config.num_host_blocks > 0
                ? std::make_unique<HostBlockPool>(config.num_host_blocks, config.block_size)
                : nullptr) {}

template <typename DeviceFn, typename HostFn>
void KvCacheManager::MatchPrefix(absl::Span<const TokenId> prompt, std::string_view cache_salt,
                                 size_t max_blocks, DeviceFn on_device, HostFn on_host) const {
  max_blocks = std::min(max_blocks, prompt.size() / block_size_);
  BlockHash hash;
  BlockId parent = kNullBlock;
  uint32_t parent_generation = pool_.generation(kNullBlock);
  bool on_device_tier = true;
  for (size_t i = 0; i < max_blocks; ++i) {
    const absl::Span<const TokenId> tokens = prompt.subspan(i * block_size_, block_size_);
    const BlockHash parent_hash = hash;
    hash = HashBlock(parent_hash, tokens, i == 0 ? cache_salt : std::string_view());
    if (on_device_tier) {
      const BlockId block = pool_.FindHash(hash);
      if (block != kNullBlock && pool_.Matches(block, tokens, parent, parent_generation)) {
        on_device(block, hash);
        parent = block;
        parent_generation = pool_.generation(block);
        continue;
      }
      on_device_tier = false;  // the chain may go on in the host tier, never back on the device
    }
    if (host_ == nullptr) return;
    const HostBlockId host = host_->Find(hash, parent_hash, tokens);
    if (host == kNoHostBlock) return;
    on_host(host, hash);
  }
}

PrefixMatch KvCacheManager::FindCachedPrefix(absl::Span<const TokenId> prompt,
                                             std::string_view cache_salt) const {
  PrefixMatch match;
  MatchPrefix(
      prompt, cache_salt, MaxPromptBlocks(prompt, block_size_),
      [&](BlockId block, const BlockHash&) {
        ++match.num_blocks;
        match.num_evictable_blocks += pool_.ref_count(block) == 0;
      },
      [&](HostBlockId, const BlockHash&) {
        ++match.num_blocks;
        ++match.num_host_blocks;
      });
  match.num_tokens = match.num_blocks * block_size_;
  return match;
}

absl::Status KvCacheManager::AllocateBlocks(int n, std::vector<BlockId>* out) {
  if (host_ == nullptr) return pool_.Allocate(n, out);
  evicted_.clear();
  KVSERVE_RETURN_IF_ERROR(pool_.Allocate(n, out, &evicted_));
  for (BlockId block : evicted_) {
    const HostBlockId host =
        host_->Store(pool_.hash(block), pool_.parent_hash(block), pool_.tokens(block));
    if (host == kNoHostBlock) continue;  // already there, or every entry is pinned
    host_copies_.push_back(HostCopy{.to_host = true, .device = block, .host = host});
    ++host_stored_blocks_;
  }
  return absl::OkStatus();
}

std::vector<KvBlockLocation> KvCacheManager::LocateBlocks(absl::Span<const TokenId> tokens,
                                                          std::string_view cache_salt,
                                                          int first_block, int max_blocks) const {
  std::vector<KvBlockLocation> located;
  if (first_block < 0 || max_blocks <= 0) return located;
  int index = 0;
  const size_t end = static_cast<size_t>(first_block) + static_cast<size_t>(max_blocks);
  MatchPrefix(
      tokens, cache_salt, end,
      [&](BlockId block, const BlockHash& hash) {
        if (index++ >= first_block)
          located.push_back({.index = index - 1, .hash = hash, .device = block});
      },
      [&](HostBlockId host, const BlockHash& hash) {
        if (index++ >= first_block)
          located.push_back({.index = index - 1, .hash = hash, .host = host});
      });
  return located;
}

absl::StatusOr<std::vector<HostBlockId>> KvCacheManager::ImportHostBlocks(
    absl::Span<const TokenId> tokens, std::string_view cache_salt, int first_block,
    int num_blocks) {
  if (host_ == nullptr) return absl::FailedPreconditionError("this worker has no host KV tier");
  const int full_blocks = static_cast<int>(tokens.size() / block_size_);
  if (first_block < 0 || num_blocks < 0 || first_block + int64_t{num_blocks} > full_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("blocks ", first_block, "..+", num_blocks,
                                                   " are not among the ", full_blocks,
                                                   " full blocks of ", tokens.size(), " tokens"));
  }
  std::vector<BlockHash> hashes;
  HashFullBlocks(tokens.first(static_cast<size_t>(first_block + num_blocks) * block_size_),
                 block_size_, cache_salt, &hashes);
  std::vector<HostBlockId> entries;
  // This import's entries in the tier: more than it holds would evict its own first blocks.
  int in_tier = 0;
  for (int j = 0; j < num_blocks; ++j) {
    const int i = first_block + j;
    const BlockHash& parent = i == 0 ? BlockHash{} : hashes[i - 1];
    const absl::Span<const TokenId> block_tokens =
        tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    if (pool_.FindHash(hashes[i]) != kNullBlock) {
      // In the pool already: nothing to write. (A colliding block with other tokens would count
      // too; harmless, the lookup that serves it verifies the tokens.)
      entries.push_back(kNoHostBlock);
      continue;
    }
    if (in_tier++ == host_->num_blocks()) break;
    // Store also refreshes an entry already holding the block, so that this import's later
    // stores cannot evict it out of the chain.
    const HostBlockId host = host_->Store(hashes[i], parent, block_tokens);
    if (host == kNoHostBlock && host_->Find(hashes[i], parent, block_tokens) == kNoHostBlock) {
      break;  // every entry is pinned
    }
    entries.push_back(host);
  }
  return entries;
}

void KvCacheManager::TakeHostCopies(std::vector<HostCopy>* copies) {
  copies->clear();
  copies->swap(host_copies_);
}

absl::StatusOr<KvCacheManager::Sequence*> KvCacheManager::Find(SequenceId id) {
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return UnknownSequence(id);
  return sequences_[it->second].get();
}

absl::StatusOr<const KvCacheManager::Sequence*> KvCacheManager::Find(SequenceId id) const {
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return UnknownSequence(id);
  return sequences_[it->second].get();
}

KvCacheManager::Sequence& KvCacheManager::NewSequence(SequenceId id) {
  int slot;
  if (free_sequence_slots_.empty()) {
    slot = static_cast<int>(sequences_.size());
    sequences_.push_back(std::make_unique<Sequence>());
  } else {
    slot = free_sequence_slots_.back();
    free_sequence_slots_.pop_back();
  }
  slot_of_[id] = slot;
  return *sequences_[slot];
}

void KvCacheManager::RecycleSequence(SequenceId id) {
  auto it = slot_of_.find(id);
  Sequence& seq = *sequences_[it->second];
  // clear() keeps the capacity, so a recycled sequence usually allocates nothing.
  seq.cache_salt.clear();
  seq.tokens.clear();
  seq.block_table.clear();
  seq.hashes.clear();
  seq.num_computed_tokens = 0;
  seq.chain_parent = kNullBlock;
  seq.chain_parent_generation = 0;
  free_sequence_slots_.push_back(it->second);
  slot_of_.erase(it);
}

absl::StatusOr<SequenceStart> KvCacheManager::AddSequence(SequenceId id,
                                                          absl::Span<const TokenId> prompt,
                                                          std::string_view cache_salt,
                                                          int max_new_tokens,
                                                          bool use_cached_prefix) {
  if (prompt.empty()) return absl::InvalidArgumentError("prompt must hold at least one token");
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  if (slot_of_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " already exists"));
  }
  Sequence& seq = NewSequence(id);
  int num_evictable_hits = 0;
  host_hits_.clear();
  BlockHash last_hit;  // the hash of the last block matched (either tier)
  MatchPrefix(
      prompt, cache_salt, use_cached_prefix ? MaxPromptBlocks(prompt, block_size_) : 0,
      [&](BlockId block, const BlockHash& hash) {
        seq.block_table.push_back(block);
        seq.hashes.push_back(hash);
        num_evictable_hits += pool_.ref_count(block) == 0;
        last_hit = hash;
      },
      [&](HostBlockId host, const BlockHash& hash) {
        host_hits_.push_back(host);
        last_hit = hash;
      });
  const int num_device_blocks = static_cast<int>(seq.block_table.size());
  const int num_host_blocks = static_cast<int>(host_hits_.size());
  const int num_hit_tokens = (num_device_blocks + num_host_blocks) * block_size_;
  // A partial block kept by a swap continues the prefix only if the prefix reaches it, and only
  // for the tokens it was computed for: the same chain before it, the same tokens in it.
  auto swapped = swapped_.find(id);
  int num_swapped_tokens = 0;
  if (swapped != swapped_.end()) {
    const Swapped& kept = swapped->second;
    // last_hit stays BlockHash{} with no hit: the parent kept for block 0.
    const bool same_chain = use_cached_prefix &&
                            kept.block_index == num_device_blocks + num_host_blocks &&
                            last_hit == kept.parent && cache_salt == kept.cache_salt;
    if (same_chain) {
      int n = static_cast<int>(std::min<int64_t>(
          kept.tokens.size(), static_cast<int64_t>(prompt.size()) - 1 - num_hit_tokens));
      n = std::max(n, 0);
      if (std::equal(kept.tokens.begin(), kept.tokens.begin() + n,
                     prompt.begin() + num_hit_tokens)) {
        num_swapped_tokens = n;
      }
    }
  }
  const int num_cached_tokens = num_hit_tokens + num_swapped_tokens;
  const int num_new_tokens =
      std::min<int64_t>(max_new_tokens, static_cast<int64_t>(prompt.size()) - num_cached_tokens);
  // Host hits need device blocks like new tokens do.
  const int num_new_blocks = BlocksFor(num_cached_tokens + num_new_tokens) - num_device_blocks;
  if (num_new_blocks + num_evictable_hits > pool_.num_free_blocks()) {
    RecycleSequence(id);
    return absl::ResourceExhaustedError(
        absl::StrCat("sequence ", id, " needs ", num_new_blocks + num_evictable_hits,
                     " free blocks, ", pool_.num_free_blocks(), " are free"));
  }
  // Attach the hits before allocating, so that allocation cannot evict them, and pin the host
  // hits, so that the copies to the host that allocation records cannot take their entries.
  for (BlockId block : seq.block_table) pool_.Acquire(block);
  for (HostBlockId host : host_hits_) host_->Pin(host);
  // Cannot fail: the check above counted the free blocks.
  [[maybe_unused]] absl::Status allocated = AllocateBlocks(num_new_blocks, &seq.block_table);
  assert(allocated.ok());
  for (int j = 0; j < num_host_blocks; ++j) {
    host_copies_.push_back(HostCopy{
        .to_host = false, .device = seq.block_table[num_device_blocks + j], .host = host_hits_[j]});
  }
  if (host_ != nullptr) host_->UnpinAll();  // the loads are recorded before any later store
  if (swapped != swapped_.end()) {
    if (num_swapped_tokens > 0) {
      host_copies_.push_back(
          HostCopy{.to_host = false,
                   .device = seq.block_table[num_device_blocks + num_host_blocks],
                   .host = swapped->second.host});
    }
    // After its load is recorded (and after the allocation's stores, which must not take it).
    host_->ReleaseSwap(swapped->second.host);
    swapped_.erase(swapped);
  }
  seq.cache_salt.assign(cache_salt);
  seq.tokens.assign(prompt.begin(), prompt.end());
  seq.num_computed_tokens = num_device_blocks * block_size_;
  if (num_device_blocks > 0) {
    seq.chain_parent = seq.block_table[num_device_blocks - 1];
    seq.chain_parent_generation = pool_.generation(seq.chain_parent);
  }
  if (num_host_blocks > 0 || num_swapped_tokens > 0) {
    // The loaded blocks count as computed from here on (the runner fills them before the
    // step's forward) and enter the device's prefix cache like computed ones.
    seq.num_computed_tokens = num_cached_tokens;
    CacheFullBlocks(seq);
  }
  prefix_query_tokens_ += static_cast<int64_t>(prompt.size());
  prefix_hit_tokens_ += num_hit_tokens;
  prefix_host_hit_tokens_ += int64_t{num_host_blocks} * block_size_;
  swapped_in_tokens_ += num_swapped_tokens;
  host_swap_loads_ += num_swapped_tokens > 0;
  return SequenceStart{.num_cached_tokens = num_cached_tokens,
                       .num_host_tokens = num_host_blocks * block_size_,
                       .num_swapped_tokens = num_swapped_tokens,
                       .num_new_tokens = num_new_tokens};
}

absl::Status KvCacheManager::AppendTokens(SequenceId id, absl::Span<const TokenId> tokens) {
  KVSERVE_ASSIGN_OR_RETURN(Sequence * seq, Find(id));
  seq->tokens.insert(seq->tokens.end(), tokens.begin(), tokens.end());
  return absl::OkStatus();
}

absl::Status KvCacheManager::AllocateSlots(SequenceId id, int num_new_tokens) {
  KVSERVE_ASSIGN_OR_RETURN(Sequence * found, Find(id));
  Sequence& seq = *found;
  const int64_t end = int64_t{seq.num_computed_tokens} + num_new_tokens;
  if (num_new_tokens < 0 || end > static_cast<int64_t>(seq.tokens.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", id, ": cannot reserve ", num_new_tokens, " slots after ",
        seq.num_computed_tokens, " computed tokens, only ", seq.tokens.size(), " are known"));
  }
  const int num_new_blocks =
      BlocksFor(static_cast<int>(end)) - static_cast<int>(seq.block_table.size());
  if (num_new_blocks <= 0) return absl::OkStatus();
  return AllocateBlocks(num_new_blocks, &seq.block_table);
}

absl::Status KvCacheManager::CommitComputed(SequenceId id, int num_tokens) {
  KVSERVE_ASSIGN_OR_RETURN(Sequence * found, Find(id));
  Sequence& seq = *found;
  const int64_t end = int64_t{seq.num_computed_tokens} + num_tokens;
  const int64_t num_slots = static_cast<int64_t>(seq.block_table.size()) * block_size_;
  if (num_tokens < 0 || end > num_slots || end > static_cast<int64_t>(seq.tokens.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", id, ": cannot commit ", num_tokens, " tokens after ", seq.num_computed_tokens,
        "; ", num_slots, " slots reserved, ", seq.tokens.size(), " tokens known"));
  }
  seq.num_computed_tokens = static_cast<int>(end);
  CacheFullBlocks(seq);
  return absl::OkStatus();
}

void KvCacheManager::CacheFullBlocks(Sequence& seq) {
  const size_t num_full = seq.num_computed_tokens / block_size_;
  for (size_t i = seq.hashes.size(); i < num_full; ++i) {
    const absl::Span<const TokenId> tokens =
        absl::MakeConstSpan(seq.tokens).subspan(i * block_size_, block_size_);
    const BlockHash hash =
        HashBlock(i == 0 ? BlockHash{} : seq.hashes[i - 1], tokens,
                  i == 0 ? std::string_view(seq.cache_salt) : std::string_view());
    seq.hashes.push_back(hash);
    const BlockId own = seq.block_table[i];
    const BlockId existing = pool_.FindHash(hash);
    BlockId chain = own;
    if (existing != kNullBlock &&
        pool_.Matches(existing, tokens, seq.chain_parent, seq.chain_parent_generation)) {
      // Another sequence computed the same block first; chain later blocks from that one so
      // they stay reachable from the cached prefix. Our copy is simply not cached.
      chain = existing;
    } else if (existing == kNullBlock || pool_.ref_count(existing) == 0) {
      // A free entry under this hash that no lookup along this chain can match (a collision,
      // or an equal block whose parent was evicted) is replaced by ours.
      if (existing != kNullBlock) pool_.Evict(existing);
      pool_.Cache(own, hash, tokens, seq.chain_parent, seq.chain_parent_generation,
                  i == 0 ? BlockHash{} : seq.hashes[i - 1]);
    }
    // Otherwise the entry is in use; our block stays uncached and later blocks chain from it.
    seq.chain_parent = chain;
    seq.chain_parent_generation = pool_.generation(chain);
  }
}

absl::StatusOr<std::optional<BlockCopy>> KvCacheManager::ForkSequence(SequenceId src,
                                                                      SequenceId dst) {
  KVSERVE_ASSIGN_OR_RETURN(Sequence * found, Find(src));
  if (slot_of_.contains(dst)) {
    return absl::AlreadyExistsError(absl::StrCat("fork target sequence ", dst, " exists"));
  }
  const Sequence& from = *found;
  const int num_full = from.num_computed_tokens / block_size_;
  const bool has_partial = from.num_computed_tokens % block_size_ != 0;
  Sequence& to = NewSequence(dst);
  std::vector<BlockId>& table = to.block_table;
  table.assign(from.block_table.begin(), from.block_table.begin() + num_full);
  std::optional<BlockCopy> copy;
  if (has_partial) {
    if (absl::Status status = AllocateBlocks(1, &table); !status.ok()) {
      RecycleSequence(dst);
      return status;
    }
    copy = BlockCopy{from.block_table[num_full], table.back()};
  }
  for (int i = 0; i < num_full; ++i) pool_.Acquire(table[i]);
  to.cache_salt = from.cache_salt;
  to.tokens = from.tokens;
  to.hashes = from.hashes;
  to.num_computed_tokens = from.num_computed_tokens;
  to.chain_parent = from.chain_parent;
  to.chain_parent_generation = from.chain_parent_generation;
  return copy;
}

absl::Status KvCacheManager::PreemptSequence(SequenceId id, bool swap) {
  KVSERVE_ASSIGN_OR_RETURN(Sequence * found, Find(id));
  const int partial = found->num_computed_tokens % block_size_;
  if (swap && host_ != nullptr && partial > 0) {
    DropSwapped(id);
    const HostBlockId host = host_->TakeForSwap();
    if (host != kNoHostBlock) {  // else it is recomputed
      const int index = found->num_computed_tokens / block_size_;
      host_copies_.push_back(
          HostCopy{.to_host = true, .device = found->block_table[index], .host = host});
      ++host_stored_blocks_;
      Swapped& kept = swapped_[id];
      kept.host = host;
      kept.block_index = index;
      kept.parent = index > 0 ? found->hashes[index - 1] : BlockHash{};
      kept.cache_salt = found->cache_salt;
      kept.tokens.assign(found->tokens.begin() + int64_t{index} * block_size_,
                         found->tokens.begin() + found->num_computed_tokens);
    }
  }
  return FreeSequence(id);
}

void KvCacheManager::DropSwapped(SequenceId id) {
  auto it = swapped_.find(id);
  if (it == swapped_.end()) return;
  host_->ReleaseSwap(it->second.host);
  swapped_.erase(it);
}

absl::Status KvCacheManager::FreeSequence(SequenceId id) {
  KVSERVE_ASSIGN_OR_RETURN(Sequence * found, Find(id));
  const std::vector<BlockId>& table = found->block_table;
  for (auto it = table.rbegin(); it != table.rend(); ++it) pool_.Release(*it);
  RecycleSequence(id);
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const BlockId>> KvCacheManager::GetBlockTable(SequenceId id) const {
  KVSERVE_ASSIGN_OR_RETURN(const Sequence* seq, Find(id));
  return absl::MakeConstSpan(seq->block_table);
}

absl::StatusOr<absl::Span<const TokenId>> KvCacheManager::GetTokens(SequenceId id) const {
  KVSERVE_ASSIGN_OR_RETURN(const Sequence* seq, Find(id));
  return absl::MakeConstSpan(seq->tokens);
}

absl::StatusOr<int> KvCacheManager::GetNumComputedTokens(SequenceId id) const {
  KVSERVE_ASSIGN_OR_RETURN(const Sequence* seq, Find(id));
  return seq->num_computed_tokens;
}

absl::Status KvCacheManager::GetSlotMapping(SequenceId id, int first_position,
                                            absl::Span<int64_t> slots) const {
  KVSERVE_ASSIGN_OR_RETURN(const Sequence* seq, Find(id));
  const std::vector<BlockId>& table = seq->block_table;
  const int64_t end = int64_t{first_position} + static_cast<int64_t>(slots.size());
  if (first_position < 0 || end > static_cast<int64_t>(table.size()) * block_size_) {
    return absl::OutOfRangeError(absl::StrCat("sequence ", id, ": positions [", first_position,
                                              ", ", end, ") exceed its ", table.size(),
                                              " blocks of ", block_size_));
  }
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t position = first_position + static_cast<int64_t>(k);
    slots[k] = int64_t{table[position / block_size_]} * block_size_ + position % block_size_;
  }
  return absl::OkStatus();
}

KvCacheStats KvCacheManager::Stats() const {
  KvCacheStats stats;
  stats.total_blocks = pool_.num_blocks() - 1;
  stats.free_blocks = pool_.num_free_blocks();
  stats.evictable_blocks = pool_.num_evictable_blocks();
  stats.used_blocks = stats.total_blocks - stats.free_blocks;
  stats.cached_blocks = pool_.num_cached_blocks();
  stats.num_sequences = static_cast<int>(slot_of_.size());
  stats.prefix_query_tokens = prefix_query_tokens_;
  stats.prefix_hit_tokens = prefix_hit_tokens_;
  stats.prefix_host_hit_tokens = prefix_host_hit_tokens_;
  if (host_ != nullptr) {
    stats.host_blocks = host_->num_blocks();
    stats.host_cached_blocks = host_->num_cached_blocks();
  }
  stats.host_stored_blocks = host_stored_blocks_;
  // A copy per hit block and per restored partial block.
  stats.host_loaded_blocks = prefix_host_hit_tokens_ / block_size_ + host_swap_loads_;
  stats.swapped_in_tokens = swapped_in_tokens_;
  return stats;
}

void KvCacheManager::DrainEvents(KvEventBatch* batch) {
  pool_.TakeEvents(&batch->events);
  if (host_ != nullptr && !host_->pending_events().empty()) {
    // Each tier is its own set, so the host tier's events may follow the device's.
    host_->TakeEvents(&host_events_);
    batch->events.insert(batch->events.end(), host_events_.begin(), host_events_.end());
  }
  batch->epoch = epoch_;
  batch->sequence_number = batch->events.empty() ? 0 : ++last_sequence_number_;
}

namespace {

// `hashes` (a tier's index now) as it was before `pending` (that tier's events not drained
// yet) happened: the state as of the last drained batch.
std::vector<BlockHash> BeforePending(absl::flat_hash_set<BlockHash> hashes,
                                     absl::Span<const KvEvent> pending) {
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
    if (it->kind == KvEventKind::kStored) {
      hashes.erase(it->hash);
    } else {
      hashes.insert(it->hash);
    }
  }
  return {hashes.begin(), hashes.end()};
}

}  // namespace

KvSnapshot KvCacheManager::Snapshot() const {
  absl::flat_hash_set<BlockHash> hashes;
  pool_.ForEachCachedBlock([&](BlockId block) { hashes.insert(pool_.hash(block)); });
  KvSnapshot snapshot{
      epoch_, last_sequence_number_, BeforePending(std::move(hashes), pool_.pending_events()), {}};
  if (host_ != nullptr) {
    absl::flat_hash_set<BlockHash> host_hashes;
    host_->ForEachCachedHash([&](const BlockHash& hash) { host_hashes.insert(hash); });
    snapshot.host_hashes = BeforePending(std::move(host_hashes), host_->pending_events());
  }
  return snapshot;
}

absl::Status KvCacheManager::CheckInvariants() const {
  KVSERVE_RETURN_IF_ERROR(pool_.CheckInvariants());
  if (host_ != nullptr) KVSERVE_RETURN_IF_ERROR(host_->CheckInvariants());
  const int swap_blocks = host_ != nullptr ? host_->num_swap_blocks() : 0;
  if (swap_blocks != static_cast<int>(swapped_.size())) {
    return absl::InternalError(
        absl::StrCat(swapped_.size(), " swapped sequences hold ", swap_blocks, " host entries"));
  }
  std::vector<int> holders(pool_.num_blocks(), 0);
  for (const auto& [id, slot] : slot_of_) {
    const Sequence& seq = *sequences_[slot];
    for (BlockId block : seq.block_table) {
      if (block <= kNullBlock || block >= pool_.num_blocks()) {
        return absl::InternalError(absl::StrCat("sequence ", id, " holds bad block ", block));
      }
      ++holders[block];
    }
    if (seq.hashes.size() != static_cast<size_t>(seq.num_computed_tokens / block_size_)) {
      return absl::InternalError(absl::StrCat("sequence ", id, " has ", seq.hashes.size(),
                                              " hashes for ", seq.num_computed_tokens,
                                              " computed tokens"));
    }
  }
  for (BlockId block = 1; block < pool_.num_blocks(); ++block) {
    if (holders[block] != pool_.ref_count(block)) {
      return absl::InternalError(absl::StrCat("block ", block, " has ref count ",
                                              pool_.ref_count(block), " but ", holders[block],
                                              " block tables hold it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve
