#include "router/cluster_books.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

// A well-mixed 64-bit hash of a counter (splitmix64's finaliser): the random policy's draws.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string_view IndexStateName(const WorkerSummary& worker) {
  if (worker.health == WorkerHealth::kUnreachable || worker.health == WorkerHealth::kRefused) {
    return "stale";
  }
  return worker.sync == KvSyncState::kInSync ? "exact" : "resyncing";
}

absl::StatusOr<std::unique_ptr<ClusterBooks>> ClusterBooks::Create(
    const RouterCoreOptions& options) {
  KVSERVE_RETURN_IF_ERROR(options.Validate());
  return std::unique_ptr<ClusterBooks>(new ClusterBooks(options));
}

ClusterBooks::ClusterBooks(const RouterCoreOptions& options)
    : options_(options), random_seed_(std::random_device{}()) {}

absl::Status ClusterBooks::AddWorker(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  if (slot_of_.contains(worker_id)) {
    return absl::AlreadyExistsError(absl::StrCat("worker ", worker_id, " is already registered"));
  }
  auto free_slot = std::find(workers_.begin(), workers_.end(), nullptr);
  if (free_slot == workers_.end()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("at most ", WorkerMask::kMaxWorkers, " workers can be registered"));
  }
  const int slot = static_cast<int>(free_slot - workers_.begin());
  *free_slot =
      std::make_unique<WorkerBooks>(worker_id, slot, options_.block_size,
                                    options_.reports_to_cover_reservation, &index_, &host_index_);
  slot_of_.emplace(worker_id, slot);
  last_chosen_[slot] = 0;
  return absl::OkStatus();
}

absl::Status ClusterBooks::RemoveWorker(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = slot_of_.find(worker_id);
  if (it == slot_of_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  const int slot = it->second;
  index_.ClearWorker(slot);
  host_index_.ClearWorker(slot);
  absl::erase_if(reserved_on_, [slot](const auto& entry) { return entry.second == slot; });
  workers_[slot].reset();
  slot_of_.erase(it);
  return absl::OkStatus();
}

WorkerBooks* ClusterBooks::Find(const std::string& worker_id) {
  auto it = slot_of_.find(worker_id);
  return it == slot_of_.end() ? nullptr : workers_[it->second].get();
}

absl::StatusOr<ApplyResult> ClusterBooks::ApplyStatus(const std::string& worker_id,
                                                      const kvserve::v1::WorkerStatus& status) {
  absl::StatusOr<ApplyResult> result;
  {
    absl::MutexLock lock(&mu_);
    WorkerBooks* books = Find(worker_id);
    if (books == nullptr) {
      return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
    }
    const uint64_t old_epoch = books->epoch();
    result = books->Apply(status);
    if (result.ok() && old_epoch != 0 && books->epoch() != old_epoch) {
      // The worker restarted and dropped its reservations; forget which requests held them.
      const int slot = books->slot();
      absl::erase_if(reserved_on_, [slot](const auto& entry) { return entry.second == slot; });
    }
  }
  if (result.ok() && result->capacity_changed) NotifyCapacityChanged();
  return result;
}

template <typename Fn>
absl::Status ClusterBooks::UpdateBooks(const std::string& worker_id, Fn update) {
  absl::MutexLock lock(&mu_);
  WorkerBooks* books = Find(worker_id);
  if (books == nullptr) {
    return absl::NotFoundError(absl::StrCat("worker ", worker_id, " is not registered"));
  }
  update(*books);
  return absl::OkStatus();
}

absl::Status ClusterBooks::MarkUnreachable(const std::string& worker_id) {
  return UpdateBooks(worker_id, [](WorkerBooks& books) { books.MarkUnreachable(); });
}

absl::Status ClusterBooks::MarkQueueFull(const std::string& worker_id) {
  bool limit_known = false;
  KVSERVE_RETURN_IF_ERROR(UpdateBooks(worker_id, [&](WorkerBooks& books) {
    limit_known = books.capacity().max_waiting_requests > 0;
    if (limit_known) books.MarkQueueFull();
  }));
  if (!limit_known) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", worker_id, " reports no waiting-queue limit"));
  }
  return absl::OkStatus();
}

absl::Status ClusterBooks::MarkRefused(const std::string& worker_id, std::string reason) {
  return UpdateBooks(worker_id, [&](WorkerBooks& books) { books.MarkRefused(std::move(reason)); });
}

absl::Status ClusterBooks::SetKvTransferFormat(const std::string& worker_id, std::string format) {
  return UpdateBooks(worker_id,
                     [&](WorkerBooks& books) { books.SetKvTransferFormat(std::move(format)); });
}

PreparedRoute ClusterBooks::Prepare(RouteRequest request) const {
  PreparedRoute prepared;
  prepared.request = std::move(request);
  HashFullBlocks(prepared.request.tokens, options_.block_size, prepared.request.cache_salt,
                 &prepared.block_hashes);
  return prepared;
}

RoutingDecision ClusterBooks::Route(const PreparedRoute& prepared) {
  absl::MutexLock lock(&mu_);
  int slot = -1;
  RoutingDecision decision = Decide(prepared, &slot);
  if (decision.verdict != RouteVerdict::kRouted) return decision;
  last_chosen_[slot] = ++num_routed_;
  const std::string& request_id = prepared.request.request_id;
  auto [it, inserted] = reserved_on_.try_emplace(request_id, slot);
  if (!inserted && it->second != slot) {
    workers_[it->second]->Release(request_id);
    it->second = slot;
  }
  workers_[slot]->Reserve(request_id, decision.charged_blocks);
  return decision;
}

RoutingDecision ClusterBooks::Evaluate(const PreparedRoute& prepared) const {
  absl::MutexLock lock(&mu_);
  int slot = -1;
  return Decide(prepared, &slot);
}

RoutingDecision ClusterBooks::Decide(const PreparedRoute& prepared, int* chosen_slot) const {
  const RouteRequest& request = prepared.request;
  RoutingQuery query;
  query.prompt_tokens = static_cast<int64_t>(request.tokens.size());
  query.max_tokens = request.max_tokens;
  query.num_choices = request.num_choices;
  query.context_length = request.context_length;
  query.block_size = options_.block_size;
  query.prefer_longest_prefix = request.prefer_longest_prefix;
  query.random_draw = SplitMix64(random_seed_ + num_routed_);

  WorkerMask candidates;
  WorkerMask sources;  // workers that can send KV blocks, whether candidates or not
  for (const std::unique_ptr<WorkerBooks>& books : workers_) {
    if (books == nullptr) continue;
    if (options_.kv_transfer && books->can_send_blocks()) sources.Set(books->slot());
    if (!books->has_capacity()) continue;
    query.largest_pool_blocks = std::max(query.largest_pool_blocks, books->capacity().total_blocks);
    if (!books->routable()) continue;
    if (std::find(request.excluded_workers.begin(), request.excluded_workers.end(),
                  books->worker_id()) != request.excluded_workers.end()) {
      continue;
    }
    candidates.Set(books->slot());
  }
  WorkerMask matched_workers = candidates;
  sources.ForEach([&](int slot) { matched_workers.Set(slot); });
  index_.MatchPrefix(prepared.block_hashes, matched_workers, &matched_);
  // A worker's chain goes on in its host tier where its pool's match ends (kv_cache_manager.h).
  // Only matched workers' entries are read; with no host tier anywhere every run is 0.
  host_matched_.resize(WorkerMask::kMaxWorkers);
  const bool any_host_tier = host_index_.size() > 0;
  matched_workers.ForEach([&](int slot) {
    host_matched_[slot] =
        any_host_tier ? host_index_.CountRun(slot, prepared.block_hashes, matched_[slot]) : 0;
  });
  // The transfer source: the longest pool + host-tier run (ties: the lowest slot). A worker the
  // request is excluded from may be it: one that failed the request by draining still serves
  // its blocks.
  int source_slot = -1;
  sources.ForEach([&](int slot) {
    const int64_t run = matched_[slot] + host_matched_[slot];
    if (run > query.source_matched_blocks) {
      source_slot = slot;
      query.source_matched_blocks = run;
    }
  });
  if (source_slot >= 0) {
    query.source_kv_transfer_format = workers_[source_slot]->kv_transfer_format();
  }

  loads_.clear();
  load_slots_.clear();
  candidates.ForEach([&](int slot) {
    const WorkerBooks& books = *workers_[slot];
    const WorkerCapacity& capacity = books.capacity();
    loads_.push_back(WorkerLoad{.total_blocks = capacity.total_blocks,
                                .free_blocks = capacity.free_blocks,
                                .evictable_blocks = capacity.evictable_blocks,
                                .reserved_blocks = books.reserved_blocks(),
                                .running_requests = capacity.running_requests,
                                .waiting_requests = books.waiting_requests(),
                                .outstanding_requests = books.outstanding_requests(),
                                .max_waiting_requests = capacity.max_waiting_requests,
                                .matched_blocks = matched_[slot],
                                .host_matched_blocks = host_matched_[slot],
                                .host_blocks = capacity.host_blocks,
                                .kv_transfer_format = books.kv_transfer_format(),
                                .last_chosen = last_chosen_[slot]});
    load_slots_.push_back(slot);
  });

  const RoutingChoice choice = ChooseWorker(query, loads_, options_.weights, options_.policy);
  RoutingDecision decision;
  decision.verdict = choice.verdict;
  decision.available_cached_tokens = choice.best_cached_blocks * options_.block_size;
  decision.needed_blocks = choice.needed_blocks;
  decision.prompt_tokens = query.prompt_tokens;
  decision.num_candidates = static_cast<int>(loads_.size());
  if (choice.verdict != RouteVerdict::kRouted) return decision;

  *chosen_slot = load_slots_[choice.index];
  decision.worker_id = workers_[*chosen_slot]->worker_id();
  decision.cached_tokens =
      (choice.chosen.cached_blocks + choice.chosen.host_cached_blocks) * options_.block_size;
  decision.cost = choice.chosen.cost;
  decision.charged_blocks = choice.chosen.charged_blocks;
  if (choice.chosen.remote_blocks > 0) {
    decision.transfer_source = workers_[source_slot]->worker_id();
    decision.transfer_source_blocks = query.source_matched_blocks;
    decision.transfer_blocks = choice.chosen.remote_blocks;
  }
  return decision;
}

int64_t ClusterBooks::largest_pool_blocks() const {
  absl::MutexLock lock(&mu_);
  int64_t largest = 0;
  for (const std::unique_ptr<WorkerBooks>& books : workers_) {
    if (books != nullptr && books->has_capacity()) {
      largest = std::max(largest, books->capacity().total_blocks);
    }
  }
  return largest;
}

bool ClusterBooks::MarkStarted(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  auto it = reserved_on_.find(request_id);
  if (it == reserved_on_.end()) return false;
  return workers_[it->second]->MarkStarted(it->first);
}

bool ClusterBooks::Release(const std::string& request_id) {
  bool released = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = reserved_on_.find(request_id);
    if (it == reserved_on_.end()) return false;
    released = workers_[it->second]->Release(it->first);
    reserved_on_.erase(it);
  }
  if (released) NotifyCapacityChanged();
  return released;
}

void ClusterBooks::SetCapacityListener(std::function<void()> listener) {
  absl::MutexLock lock(&mu_);
  listener_ = std::move(listener);
}

void ClusterBooks::NotifyCapacityChanged() {
  std::function<void()> listener;
  {
    absl::MutexLock lock(&mu_);
    listener = listener_;
  }
  if (listener) listener();
}

std::vector<WorkerSummary> ClusterBooks::Workers() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerSummary> summaries;
  for (const std::unique_ptr<WorkerBooks>& books : workers_) {
    if (books == nullptr) continue;
    summaries.push_back(WorkerSummary{.worker_id = books->worker_id(),
                                      .reported_id = books->reported_id(),
                                      .health = books->health(),
                                      .refused_reason = books->refused_reason(),
                                      .capacity_known = books->has_capacity(),
                                      .sync = books->sync_state(),
                                      .capacity = books->capacity(),
                                      .kv_transfer_format = books->kv_transfer_format(),
                                      .cached_blocks = books->cached_blocks(),
                                      .host_cached_blocks = books->host_cached_blocks(),
                                      .reserved_blocks = books->reserved_blocks(),
                                      .outstanding_requests = books->outstanding_requests(),
                                      .last_report = books->last_report()});
  }
  return summaries;
}

size_t ClusterBooks::num_cached_hashes() const {
  absl::MutexLock lock(&mu_);
  return index_.size();
}

}  // namespace kvserve
