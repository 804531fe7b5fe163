// ClusterBooks: the router's books for every worker group, and the routing entry point.
//
// It owns one WorkerBooks per registered worker and the cluster-wide PrefixIndex of their
// cached block hashes. Status-stream threads feed it (ApplyStatus, MarkUnreachable); request
// threads ask it where to send a request (Prepare then Route), and report the request's progress
// (MarkStarted, Release). Routing and reserving happen in one critical section, so two requests
// routed at once never both take a worker's last free blocks.
//
// A request is routed in two steps so that the expensive part runs outside the lock:
//   PreparedRoute prepared = books.Prepare(std::move(request));  // hashes the prompt, no lock
//   RoutingDecision decision = books.Route(prepared);            // match, score, reserve
// The prompt's chained block hashes are computed with kvcache/block_hash.h exactly as the
// workers' KvCacheManager computes them (full blocks only, the cache salt in block 0's extra
// keys), so they can be looked up in the index directly.
//
// KV block transfer: every decision also picks a transfer source, the worker (healthy or
// draining, with a kv_transfer_format; a candidate or not, an excluded one too) whose pool +
// host-tier run of the context is the longest, and scores the candidates with it
// (routing_policy.h). When the chosen worker would fetch blocks from it, the decision names the
// source's address and match (RoutingDecision::transfer_*), which the request is sent with
// (worker.proto KvSource). RouterCoreOptions::kv_transfer false turns this off.
//
// Capacity listener: after every change that may let a waiting request fit (a status report
// that changed capacity, health or reservations; a Release), the listener set with
// SetCapacityListener is called, outside the lock, on the thread that made the change. The
// admission queue uses it to retry its waiters.
//
// Thread-safety: thread-safe. `mu_` guards the workers, the index and the request map. Lock
// order: AdmissionQueue::mu_ before ClusterBooks::mu_; ClusterBooks never calls out while
// holding mu_.

#ifndef KVSERVE_ROUTER_CLUSTER_BOOKS_H_
#define KVSERVE_ROUTER_CLUSTER_BOOKS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvcache/block_hash.h"
#include "kvcache/types.h"
#include "kvserve/v1/worker.pb.h"
#include "router/prefix_index.h"
#include "router/router_options.h"
#include "router/routing_policy.h"
#include "router/worker_books.h"

namespace kvserve {

// A request to place. Owns its data: it may wait in the admission queue.
struct RouteRequest {
  std::string request_id = {};       // unique among the router's live requests (keys reservations)
  std::vector<TokenId> tokens = {};  // the context to prefill: prompt (+ generated, on a migration)
  std::string cache_salt = {};       // the tenant's salt, from authentication
  int64_t max_tokens = 0;            // tokens still to generate, per choice (> 0)
  int32_t num_choices = 1;           // choices still running (each holds its own blocks)
  int64_t context_length = 0;        // the cap on one choice's length (0: none); kv_budget.h
  // Workers not to use (a migration excludes the worker that failed).
  std::vector<std::string> excluded_workers = {};
  bool prefer_longest_prefix = false;  // migration: most cached blocks first
};

// A request with its prompt hashed. Build with ClusterBooks::Prepare.
struct PreparedRoute {
  RouteRequest request;
  std::vector<BlockHash> block_hashes;  // [tokens.size() / block_size]
};

// The answer, with what the metrics want to know.
struct RoutingDecision {
  RouteVerdict verdict = RouteVerdict::kNoWorker;
  std::string worker_id;      // kRouted only
  int64_t cached_tokens = 0;  // prefix tokens the chosen worker is believed to hold
  // The longest prefix (tokens) any candidate worker is believed to hold: the reuse available.
  int64_t available_cached_tokens = 0;
  double cost = 0;             // the chosen worker's cost (routing_policy.h)
  int64_t charged_blocks = 0;  // reserved on the chosen worker
  int64_t needed_blocks = 0;
  int64_t prompt_tokens = 0;  // the context the request prefills (RouteRequest::tokens)
  int num_candidates = 0;     // routable workers considered
  // A planned KV transfer (worker.proto KvSource), kRouted only: the chosen worker fetches
  // `transfer_blocks` blocks (routing_policy.h WorkerCost::remote_blocks) from the worker
  // `transfer_source` (its id in the books: the address the router dials), which holds
  // `transfer_source_blocks` leading context blocks by the books. Empty / 0: none planned.
  std::string transfer_source;
  int64_t transfer_source_blocks = 0;
  int64_t transfer_blocks = 0;
};

// A worker's books, copied out for metrics and debugging.
struct WorkerSummary {
  std::string worker_id = {};    // the address the router dials
  std::string reported_id = {};  // the worker's own id (WorkerIdentity), once reported
  WorkerHealth health = WorkerHealth::kUnreachable;
  std::string refused_reason = {};  // health kRefused: which fingerprint part differs
  bool capacity_known = false;      // a capacity report arrived
  KvSyncState sync = KvSyncState::kAwaitingSnapshot;
  WorkerCapacity capacity;
  std::string kv_transfer_format = {};  // ModelInfo.kv_transfer_format (empty: no transfer)
  int64_t cached_blocks = 0;            // hashes in the router's index of its pool
  int64_t host_cached_blocks = 0;       // and of its host tier
  int64_t reserved_blocks = 0;
  int outstanding_requests = 0;
  absl::Time last_report = absl::InfinitePast();  // the last status message applied
};

// The router's index of one worker's cached blocks, for metrics and the admin API: "exact" (in
// sync with its KV events), "resyncing" (waiting for or receiving a snapshot while reachable) or
// "stale" (unreachable or refused: its hashes were dropped).
std::string_view IndexStateName(const WorkerSummary& worker);

class ClusterBooks {
 public:
  // INVALID_ARGUMENT naming the field when `options` is invalid.
  static absl::StatusOr<std::unique_ptr<ClusterBooks>> Create(const RouterCoreOptions& options);

  ClusterBooks(const ClusterBooks&) = delete;
  ClusterBooks& operator=(const ClusterBooks&) = delete;

  const RouterCoreOptions& options() const { return options_; }

  // Registers a worker (unreachable, not routable, until its first status report).
  // ALREADY_EXISTS for a known id; RESOURCE_EXHAUSTED past WorkerMask::kMaxWorkers.
  absl::Status AddWorker(const std::string& worker_id);
  // Forgets a worker, its hashes and its reservations. NOT_FOUND when unknown.
  absl::Status RemoveWorker(const std::string& worker_id);

  // Applies a status message from the worker's stream (worker_books.h). NOT_FOUND when the worker
  // is unknown; otherwise as WorkerBooks::Apply. Calls the listener when capacity changed.
  absl::StatusOr<ApplyResult> ApplyStatus(const std::string& worker_id,
                                          const kvserve::v1::WorkerStatus& status);
  // The worker's stream broke: not routable, its hashes dropped, until a message of a new stream
  // (which starts with a snapshot) arrives; do not apply the old stream's messages after this.
  // Reservations stay: their requests Release them. NOT_FOUND when unknown.
  absl::Status MarkUnreachable(const std::string& worker_id);
  // WorkerBooks::MarkQueueFull. NOT_FOUND when unknown; FAILED_PRECONDITION when the worker
  // reports no waiting-queue limit (then its queue cannot be counted full).
  absl::Status MarkQueueFull(const std::string& worker_id);
  // WorkerBooks::MarkRefused (an empty reason lifts the refusal). NOT_FOUND when unknown.
  absl::Status MarkRefused(const std::string& worker_id, std::string reason);
  // The worker's ModelInfo.kv_transfer_format (empty: it neither sends nor receives KV blocks).
  // NOT_FOUND when unknown.
  absl::Status SetKvTransferFormat(const std::string& worker_id, std::string format);

  // Hashes the request's full blocks. Takes no lock.
  PreparedRoute Prepare(RouteRequest request) const;
  // Chooses a worker and, when one is chosen, reserves the charged blocks there for
  // request_id (replacing any reservation the request had, e.g. on the worker it migrates from).
  RoutingDecision Route(const PreparedRoute& prepared);
  // The decision Route would make now, without reserving anything.
  RoutingDecision Evaluate(const PreparedRoute& prepared) const;

  // The worker acknowledged the request (its first output): the reservation will be released
  // once reports cover it (router_options.h). A reservation never marked started is held until
  // Release. False when the request holds no reservation.
  bool MarkStarted(const std::string& request_id);
  // The request ended (finished, cancelled, failed, migrated away): drops its reservation.
  // False when it held none. Calls the listener when it did.
  bool Release(const std::string& request_id);

  // Called after changes that may let a waiting request fit; see the file comment.
  void SetCapacityListener(std::function<void()> listener);

  std::vector<WorkerSummary> Workers() const;
  // The largest total_blocks any worker reported (0 before any report).
  int64_t largest_pool_blocks() const;
  size_t num_cached_hashes() const;

 private:
  explicit ClusterBooks(const RouterCoreOptions& options);

  // The decision and, for kRouted, the chosen worker's slot in *chosen_slot.
  RoutingDecision Decide(const PreparedRoute& prepared, int* chosen_slot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WorkerBooks* Find(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls update(books) for the worker under the lock; NOT_FOUND when it is not registered.
  template <typename Fn>
  absl::Status UpdateBooks(const std::string& worker_id, Fn update) ABSL_LOCKS_EXCLUDED(mu_);
  void NotifyCapacityChanged() ABSL_LOCKS_EXCLUDED(mu_);

  const RouterCoreOptions options_;

  mutable absl::Mutex mu_;
  PrefixIndex index_ ABSL_GUARDED_BY(mu_);       // blocks in the workers' pools
  PrefixIndex host_index_ ABSL_GUARDED_BY(mu_);  // blocks in their host tiers
  // Indexed by slot; null where no worker is registered.
  std::array<std::unique_ptr<WorkerBooks>, WorkerMask::kMaxWorkers> workers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> slot_of_ ABSL_GUARDED_BY(mu_);
  // request id -> slot of the worker holding its reservation.
  absl::flat_hash_map<std::string, int> reserved_on_ ABSL_GUARDED_BY(mu_);
  std::function<void()> listener_ ABSL_GUARDED_BY(mu_);
  // Routing decisions made so far, and per slot the decision that last chose the worker there
  // (0: never): the routing policy's last tie-breaker.
  uint64_t num_routed_ ABSL_GUARDED_BY(mu_) = 0;
  const uint64_t random_seed_;  // the random policy's draws: a hash of (seed, num_routed_)
  std::array<uint64_t, WorkerMask::kMaxWorkers> last_chosen_ ABSL_GUARDED_BY(mu_) = {};
  // Scratch for Decide, reused to avoid allocating per decision.
  mutable std::vector<int> matched_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<int> host_matched_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<WorkerLoad> loads_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<int> load_slots_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_CLUSTER_BOOKS_H_
