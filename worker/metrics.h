// WorkerMetrics: the worker's Prometheus metrics (prefix kvserve_, every name documented in
// docs/metrics.md). It is the EngineObserver the engine calls during each step (requests,
// tokens, latencies, preemptions, prefix-cache lookups), and a prometheus::Collectable that reads
// the engine's capacity (KV blocks, running / waiting requests) at scrape time through a stats
// source, so the gauges are never stale. The service layer adds the requests it refuses before
// they reach the engine (RecordRejected).
//
// Serve it with MetricsServer::Register(metrics) (http/metrics_server.h); Serialize() renders the
// text exposition format (what /metrics returns) for tests and tools.
//
// Thread-safety: observer callbacks come from the engine thread, Collect from the metrics
// server's thread, RecordRejected from gRPC threads; prometheus-cpp metrics are thread-safe and the
// stats source is guarded by mu_.
#ifndef KVSERVE_WORKER_METRICS_H_
#define KVSERVE_WORKER_METRICS_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/engine_observer.h"
#include "engine/engine_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace kvserve {

class WorkerMetrics : public EngineObserver, public prometheus::Collectable {
 public:
  // Series carry no worker label: Prometheus adds `instance` (and the ServiceMonitor `pod`).
  WorkerMetrics();
  ~WorkerMetrics() override;

  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // Where Collect reads capacity from (typically [&engine] { return engine.Stats(); }).
  // Thread-safe; may be called again to replace or (with nullptr) remove the source.
  void SetStatsSource(std::function<EngineStats()> source);

  // Appends one CSV line per engine step to `path` from now on (header first when the file is
  // empty): duration_ms,prefill_tokens,decode_tokens,seqs,prefill_attended_tokens,
  // decode_context_tokens. What
  // bench/calibrate_step_time.py fits a simulated worker's step time to. Call before the engine
  // runs steps. INVALID_ARGUMENT naming --step_log when the file cannot be opened.
  absl::Status OpenStepLog(const std::string& path);

  // Sets the capacity gauges from `stats` now (Collect does this itself when a source is set).
  void UpdateCapacity(const EngineStats& stats);

  // A request refused before reaching the engine (validation, draining, full queue).
  void RecordRejected(absl::StatusCode code);

  // KV block transfer between workers: blocks sent (FetchKvBlocks served) or received (verified
  // on arrival), and one fetch of this worker's: "complete", "partial" (it kept a verified run,
  // the rest is computed) or "failed" (nothing kept), with its duration.
  void RecordKvTransferBlocks(bool sent, int64_t blocks);
  void RecordKvFetch(absl::string_view result, absl::Duration duration);

  // One step of a tensor-parallel group (leader): the plan broadcast to the followers and the
  // step's all-reduce time (the sum over its calls).
  void RecordTensorParallelStep(absl::Duration broadcast, absl::Duration all_reduce);

  // EngineObserver.
  void OnStep(const StepMetrics& step) override;
  void OnRequestFinished(const RequestMetrics& request) override;
  void OnTokenEmitted(absl::Duration inter_token_latency) override;
  void OnPreemption() override;
  void OnPrefixCacheQuery(int64_t query_tokens, int64_t hit_tokens,
                          int64_t host_hit_tokens) override;

  // prometheus::Collectable: refreshes the capacity gauges, then returns every family.
  std::vector<prometheus::MetricFamily> Collect() const override;

  // The text exposition format of Collect(), as /metrics serves it.
  std::string Serialize() const;

 private:
  // The --step_log file (engine thread only once the engine runs); null when off.
  std::FILE* step_log_ = nullptr;
  prometheus::Counter& FinishedCounter(absl::string_view reason);
  prometheus::Counter& RejectedCounter(absl::StatusCode code);
  void ApplyCapacity(const EngineStats& stats) const;  // the gauges are pointers: const is fine

  std::shared_ptr<prometheus::Registry> registry_;
  mutable absl::Mutex mu_;
  std::function<EngineStats()> stats_source_ ABSL_GUARDED_BY(mu_);

  // Capacity (gauges), set from EngineStats.
  prometheus::Gauge* kv_blocks_total_;
  prometheus::Gauge* kv_blocks_free_;
  prometheus::Gauge* kv_blocks_used_;
  prometheus::Gauge* kv_blocks_cached_evictable_;
  prometheus::Gauge* kv_cache_usage_ratio_;
  prometheus::Gauge* kv_block_size_;
  prometheus::Gauge* kv_host_blocks_total_;
  prometheus::Gauge* kv_host_blocks_cached_;
  prometheus::Gauge* requests_running_;
  prometheus::Gauge* requests_waiting_;
  prometheus::Gauge* draining_;
  // Counters.
  prometheus::Counter* prefix_cache_queried_tokens_;
  prometheus::Counter* prefix_cache_hit_tokens_;
  prometheus::Counter* prefix_cache_host_hit_tokens_;
  prometheus::Counter* kv_host_stores_;
  prometheus::Counter* kv_host_loads_;
  prometheus::Counter* kv_host_load_waits_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* kv_transfer_blocks_sent_;
  prometheus::Counter* kv_transfer_blocks_received_;
  prometheus::Family<prometheus::Counter>* kv_fetches_;
  prometheus::Histogram* kv_fetch_duration_;
  prometheus::Counter* prompt_tokens_;
  prometheus::Counter* cached_prompt_tokens_;
  prometheus::Counter* generation_tokens_;
  prometheus::Counter* steps_;
  prometheus::Family<prometheus::Counter>* requests_finished_;
  prometheus::Family<prometheus::Counter>* requests_rejected_;
  // Histograms.
  prometheus::Histogram* time_to_first_token_;
  prometheus::Histogram* inter_token_latency_;
  prometheus::Histogram* e2e_latency_;
  prometheus::Histogram* queue_time_;
  prometheus::Histogram* step_duration_;
  prometheus::Histogram* step_tokens_;
  prometheus::Histogram* step_sequences_;
  prometheus::Histogram* tp_plan_broadcast_;
  prometheus::Histogram* tp_allreduce_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_METRICS_H_
