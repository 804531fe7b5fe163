// RouterMetrics: the router's Prometheus metrics, all prefixed kvserve_router_ (docs/metrics.md,
// "Router"): per-worker capacity gauges from the router's books (label `worker`), requests routed
// per worker, admission queue depth and wait time, routing decision latency, migrations, and
// rejections by reason. Served by prometheus::Exposer through registry().
//
// Thread-safety: thread-safe (prometheus-cpp metrics are; `mu_` guards the per-worker gauges).
#ifndef KVSERVE_ROUTER_ROUTER_METRICS_H_
#define KVSERVE_ROUTER_ROUTER_METRICS_H_

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
  // `reason`: queue_full, never_fits, no_worker, shutting_down (RefusalLabel), unauthenticated,
  // invalid_argument, deadline, cancelled, migrations_exhausted, worker_error.
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
    prometheus::Gauge* reserved_blocks;
    prometheus::Gauge* running_requests;
    prometheus::Gauge* waiting_requests;
    prometheus::Gauge* healthy;
  };
  WorkerGauges& GaugesFor(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveGauges(const WorkerGauges& gauges) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

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

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, WorkerGauges> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_METRICS_H_
