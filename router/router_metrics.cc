#include "router/router_metrics.h"

#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"

namespace kvserve {
namespace {

// Name and help of each per-worker gauge, in the order of RouterMetrics::WorkerGauges.
constexpr std::pair<const char*, const char*> kWorkerGauges[] = {
    {"kvserve_router_worker_total_blocks", "KV blocks of the worker's pool (its last report)"},
    {"kvserve_router_worker_free_blocks", "Free KV blocks, evictable included (last report)"},
    {"kvserve_router_worker_evictable_blocks", "Free blocks holding a cached prefix"},
    {"kvserve_router_worker_used_blocks", "Blocks held by running requests (last report)"},
    {"kvserve_router_worker_cached_blocks", "Block hashes the router's index holds for it"},
    {"kvserve_router_worker_host_cached_blocks",
     "Block hashes the router's index holds for the worker's host KV tier"},
    {"kvserve_router_worker_reserved_blocks", "Blocks this router charged and no report covers"},
    {"kvserve_router_worker_running_requests", "Requests the worker is generating"},
    {"kvserve_router_worker_waiting_requests", "Requests queued in the worker's scheduler"},
    {"kvserve_router_worker_healthy", "1 when the worker is routable, 0 otherwise"},
    {"kvserve_router_worker_last_report_timestamp_seconds",
     "Unix time of the worker's last status message applied to the index (0: none); "
     "time() minus this is the index's lag"},
};

// The reasons of kvserve_router_requests_rejected_total (RecordRejection's callers, and
// RefusalLabel of router/admission_queue.h), exported at 0 from the start.
constexpr const char* kRejectionReasons[] = {
    "queue_full",       "never_fits", "no_worker", "shutting_down",        "unauthenticated",
    "invalid_argument", "deadline",   "cancelled", "migrations_exhausted", "workers_failed",
    "worker_error"};

// The states of kvserve_router_worker_index_state, in the order of WorkerGauges::index_states.
constexpr const char* kIndexStates[] = {"exact", "resyncing", "stale"};

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.00001, 0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100};
}

}  // namespace

RouterMetrics::RouterMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  for (const auto& [name, help] : kWorkerGauges) {
    worker_families_.push_back(&prometheus::BuildGauge().Name(name).Help(help).Register(r));
  }
  routed_ = &prometheus::BuildCounter()
                 .Name("kvserve_router_requests_routed_total")
                 .Help("Dispatches to a worker (first submissions and migrations)")
                 .Register(r);
  rejected_ = &prometheus::BuildCounter()
                   .Name("kvserve_router_requests_rejected_total")
                   .Help("Requests the router refused or could not finish, by reason")
                   .Register(r);
  finished_ = &prometheus::BuildCounter()
                   .Name("kvserve_router_requests_finished_total")
                   .Help("Generate calls that ended, by gRPC status code")
                   .Register(r);
  // Every known label value present at 0 from the start, so rate() and alerts work at once.
  for (const char* reason : kRejectionReasons) rejected_->Add({{"reason", reason}});
  for (int code = 0; code <= static_cast<int>(absl::StatusCode::kUnauthenticated); ++code) {
    finished_->Add({{"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}});
  }
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("kvserve_router_queue_depth")
                      .Help("Requests waiting in the admission queue")
                      .Register(r)
                      .Add({});
  queue_wait_seconds_ = &prometheus::BuildHistogram()
                             .Name("kvserve_router_queue_wait_seconds")
                             .Help("Time requests waited in the admission queue")
                             .Register(r)
                             .Add({}, SecondsBuckets());
  decision_seconds_ = &prometheus::BuildHistogram()
                           .Name("kvserve_router_routing_decision_seconds")
                           .Help("Time to hash a prompt, score the workers and reserve blocks")
                           .Register(r)
                           .Add({}, SecondsBuckets());
  migrations_ = &prometheus::BuildCounter()
                     .Name("kvserve_router_migrations_total")
                     .Help("Requests moved to another worker after theirs failed mid-stream")
                     .Register(r)
                     .Add({});
  index_state_ = &prometheus::BuildGauge()
                      .Name("kvserve_router_worker_index_state")
                      .Help(
                          "The router's index of the worker's cached blocks: 1 for its state "
                          "(exact: in sync with its KV events; resyncing: awaiting a snapshot; "
                          "stale: unreachable or refused, hashes dropped), 0 for the others")
                      .Register(r);
  routed_prompt_tokens_ = &prometheus::BuildCounter()
                               .Name("kvserve_router_routed_prompt_tokens_total")
                               .Help("Prompt tokens of requests routed (first dispatch)")
                               .Register(r)
                               .Add({});
  auto& prefix_tokens = prometheus::BuildCounter()
                            .Name("kvserve_router_prefix_reuse_tokens_total")
                            .Help(
                                "Prompt tokens of cached prefix: available (the longest on "
                                "any routable worker), captured (on the chosen worker), "
                                "delivered (the worker reported served from its cache)")
                            .Register(r);
  available_tokens_ = &prefix_tokens.Add({{"stage", "available"}});
  captured_tokens_ = &prefix_tokens.Add({{"stage", "captured"}});
  delivered_tokens_ = &prefix_tokens.Add({{"stage", "delivered"}});
  auto& ratios = prometheus::BuildGauge()
                     .Name("kvserve_router_prefix_reuse_ratio")
                     .Help(
                         "Cached prefix tokens captured by routing / delivered by workers, as "
                         "a fraction of those available, since start")
                     .Register(r);
  captured_ratio_ = &ratios.Add({{"stage", "captured"}});
  delivered_ratio_ = &ratios.Add({{"stage", "delivered"}});
  transfers_planned_ = &prometheus::BuildCounter()
                            .Name("kvserve_router_kv_transfers_planned_total")
                            .Help(
                                "Dispatches (first and migrations) sent with a KV source: the "
                                "worker fetches context blocks from another worker")
                            .Register(r)
                            .Add({});
  transfer_blocks_planned_ = &prometheus::BuildCounter()
                                  .Name("kvserve_router_kv_transfer_blocks_planned_total")
                                  .Help(
                                      "KV blocks those dispatches were expected to fetch instead "
                                      "of computing")
                                  .Register(r)
                                  .Add({});
}

RouterMetrics::WorkerGauges& RouterMetrics::GaugesFor(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) return it->second;
  std::vector<prometheus::Gauge*> gauges;
  for (prometheus::Family<prometheus::Gauge>* family : worker_families_) {
    gauges.push_back(&family->Add({{"worker", worker_id}}));
  }
  routed_->Add({{"worker", worker_id}});  // its dispatch counter at 0 from the worker's arrival
  WorkerGauges added{gauges[0], gauges[1], gauges[2], gauges[3], gauges[4],  gauges[5],
                     gauges[6], gauges[7], gauges[8], gauges[9], gauges[10], {}};
  for (const char* state : kIndexStates) {
    added.index_states.push_back(&index_state_->Add({{"worker", worker_id}, {"state", state}}));
  }
  return workers_.emplace(worker_id, added).first->second;
}

void RouterMetrics::RemoveGauges(const WorkerGauges& gauges) {
  prometheus::Gauge* const all[] = {
      gauges.total_blocks,    gauges.free_blocks,          gauges.evictable_blocks,
      gauges.used_blocks,     gauges.cached_blocks,        gauges.host_cached_blocks,
      gauges.reserved_blocks, gauges.running_requests,     gauges.waiting_requests,
      gauges.healthy,         gauges.last_report_timestamp};
  for (size_t i = 0; i < worker_families_.size(); ++i) worker_families_[i]->Remove(all[i]);
  for (prometheus::Gauge* state : gauges.index_states) index_state_->Remove(state);
}

void RouterMetrics::SetWorkers(const std::vector<WorkerSummary>& workers) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<std::string> listed;
  for (const WorkerSummary& worker : workers) {
    listed.insert(worker.worker_id);
    WorkerGauges& g = GaugesFor(worker.worker_id);
    g.total_blocks->Set(static_cast<double>(worker.capacity.total_blocks));
    g.free_blocks->Set(static_cast<double>(worker.capacity.free_blocks));
    g.evictable_blocks->Set(static_cast<double>(worker.capacity.evictable_blocks));
    g.used_blocks->Set(static_cast<double>(worker.capacity.used_blocks));
    g.cached_blocks->Set(static_cast<double>(worker.cached_blocks));
    g.host_cached_blocks->Set(static_cast<double>(worker.host_cached_blocks));
    g.reserved_blocks->Set(static_cast<double>(worker.reserved_blocks));
    g.running_requests->Set(worker.capacity.running_requests);
    g.waiting_requests->Set(worker.capacity.waiting_requests);
    g.healthy->Set(worker.health == WorkerHealth::kHealthy ? 1 : 0);
    g.last_report_timestamp->Set(
        worker.last_report == absl::InfinitePast()
            ? 0
            : absl::ToDoubleSeconds(worker.last_report - absl::UnixEpoch()));
    const std::string_view state = IndexStateName(worker);
    for (size_t i = 0; i < g.index_states.size(); ++i) {
      g.index_states[i]->Set(state == kIndexStates[i] ? 1 : 0);
    }
  }
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (listed.contains(it->first)) {
      ++it;
      continue;
    }
    RemoveGauges(it->second);
    workers_.erase(it++);
  }
}

void RouterMetrics::RecordRouted(const std::string& worker_id) {
  routed_->Add({{"worker", worker_id}}).Increment();
}

void RouterMetrics::RecordRoutingQuality(int64_t prompt_tokens, int64_t available_tokens,
                                         int64_t captured_tokens) {
  absl::MutexLock lock(&mu_);
  routed_prompt_tokens_->Increment(static_cast<double>(prompt_tokens));
  available_tokens_->Increment(static_cast<double>(available_tokens));
  captured_tokens_->Increment(static_cast<double>(captured_tokens));
  UpdateReuseRatios();
}

void RouterMetrics::RecordDeliveredReuse(int64_t cached_tokens) {
  absl::MutexLock lock(&mu_);
  delivered_tokens_->Increment(static_cast<double>(cached_tokens));
  UpdateReuseRatios();
}

void RouterMetrics::RecordTransferPlanned(int64_t blocks) {
  transfers_planned_->Increment();
  transfer_blocks_planned_->Increment(static_cast<double>(blocks));
}

void RouterMetrics::UpdateReuseRatios() {
  const double available = available_tokens_->Value();
  if (available <= 0) return;
  captured_ratio_->Set(captured_tokens_->Value() / available);
  delivered_ratio_->Set(delivered_tokens_->Value() / available);
}

void RouterMetrics::RecordDecision(absl::Duration latency) {
  decision_seconds_->Observe(absl::ToDoubleSeconds(latency));
}

void RouterMetrics::RecordQueueWait(absl::Duration wait) {
  queue_wait_seconds_->Observe(absl::ToDoubleSeconds(wait));
}

void RouterMetrics::RecordRejection(absl::string_view reason) {
  rejected_->Add({{"reason", std::string(reason)}}).Increment();
}

void RouterMetrics::RecordFinished(absl::string_view code) {
  finished_->Add({{"code", std::string(code)}}).Increment();
}

}  // namespace kvserve
