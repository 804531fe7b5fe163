// RouterMetrics: the router's Prometheus metrics, all prefixed kvserve_router_ (docs/metrics.md,
// "Router"): per-worker capacity gauges from the router's books (label `worker`), requests routed
// per worker, admission queue depth and wait time, routing decision latency, migrations,
// rejections by reason, and the routing quality: how much prefix reuse each decision had
// available (the longest prefix any routable worker holds), how much it captured (the chosen
// worker's), and how much the worker delivered (the prompt tokens it reported cached), with the
// state of the index per worker (exact / resyncing / stale) and when it was last updated; and the
// KV block transfers planned (dispatches sent with a KvSource, and the blocks they should move).
// Served by the MetricsServer (http/metrics_server.h) through registry().
//
// Thread-safety: thread-safe (prometheus-cpp metrics are; `mu_` guards the per-worker gauges).
#ifndef KVSERVE_ROUTER_ROUTER_METRICS_H_
#define KVSERVE_ROUTER_ROUTER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "router/cluster_books.h"

namespace kvserve {

class RouterMetrics {
 public:
  RouterMetrics();
  RouterMetrics(const RouterMetrics&) = delete;
  RouterMetrics& operator=(const RouterMetrics&) = delete;

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Replaces the per-worker gauges with `workers` (workers no longer listed lose their series).
  void SetWorkers(const std::vector<WorkerSummary>& workers);
  void SetQueueDepth(int depth) { queue_depth_->Set(depth); }

  void RecordRouted(const std::string& worker_id);
  void RecordDecision(absl::Duration latency);
  void RecordQueueWait(absl::Duration wait);
  void RecordMigration() { migrations_->Increment(); }
  // A request's first dispatch (migrations are not counted): its prompt tokens, the longest
  // cached prefix on any routable worker and on the chosen one, in tokens, as the index believes.
  void RecordRoutingQuality(int64_t prompt_tokens, int64_t available_tokens,
                            int64_t captured_tokens);
  // The worker that finished a request reported this many prompt tokens served from its cache.
  void RecordDeliveredReuse(int64_t cached_tokens);
  // A dispatch (first or migration) went out with a KV source: the worker should fetch `blocks`
  // blocks (RoutingDecision::transfer_blocks) instead of computing them.
  void RecordTransferPlanned(int64_t blocks);
  // `reason`: queue_full, never_fits, no_worker, shutting_down (RefusalLabel), unauthenticated,
  // invalid_argument, deadline, cancelled, migrations_exhausted, workers_failed (every worker
  // that could continue the request failed it), worker_error.
  void RecordRejection(absl::string_view reason);
  // Every request that ended, by gRPC status code name (e.g. "OK", "CANCELLED").
  void RecordFinished(absl::string_view code);

 private:
  struct WorkerGauges {
    prometheus::Gauge* total_blocks;
    prometheus::Gauge* free_blocks;
    prometheus::Gauge* evictable_blocks;
    prometheus::Gauge* used_blocks;
    prometheus::Gauge* cached_blocks;
    prometheus::Gauge* host_cached_blocks;
    prometheus::Gauge* reserved_blocks;
    prometheus::Gauge* running_requests;
    prometheus::Gauge* waiting_requests;
    prometheus::Gauge* healthy;
    prometheus::Gauge* last_report_timestamp;
    // kvserve_router_worker_index_state{state="exact"|"resyncing"|"stale"}: one of them is 1.
    std::vector<prometheus::Gauge*> index_states;
  };
  WorkerGauges& GaugesFor(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveGauges(const WorkerGauges& gauges) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateReuseRatios() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::shared_ptr<prometheus::Registry> registry_;
  // Per-worker gauge families, in the order of WorkerGauges' members.
  std::vector<prometheus::Family<prometheus::Gauge>*> worker_families_;
  prometheus::Family<prometheus::Counter>* routed_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Gauge* queue_depth_;
  prometheus::Histogram* queue_wait_seconds_;
  prometheus::Histogram* decision_seconds_;
  prometheus::Counter* migrations_;
  prometheus::Family<prometheus::Gauge>* index_state_;
  prometheus::Counter* routed_prompt_tokens_;
  prometheus::Counter* available_tokens_;
  prometheus::Counter* captured_tokens_;
  prometheus::Counter* delivered_tokens_;
  prometheus::Gauge* captured_ratio_;
  prometheus::Gauge* delivered_ratio_;
  prometheus::Counter* transfers_planned_;
  prometheus::Counter* transfer_blocks_planned_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, WorkerGauges> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_METRICS_H_
