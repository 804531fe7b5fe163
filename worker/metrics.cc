#include "worker/metrics.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"
#include "worker/request_log.h"

namespace kvserve {
namespace {

using prometheus::Histogram;

prometheus::Gauge* AddGauge(prometheus::Registry& registry, const std::string& name,
                            const std::string& help) {
  return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Counter* AddCounter(prometheus::Registry& registry, const std::string& name,
                                const std::string& help) {
  return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Histogram* AddHistogram(prometheus::Registry& registry, const std::string& name,
                                    const std::string& help, Histogram::BucketBoundaries buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(
      {}, std::move(buckets));
}

double Seconds(absl::Duration duration) { return absl::ToDoubleSeconds(duration); }

}  // namespace

WorkerMetrics::WorkerMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  prometheus::Registry& r = *registry_;
  kv_blocks_total_ = AddGauge(r, "kvserve_kv_blocks_capacity",
                              "Usable KV cache blocks in the pool (null block excluded).");
  kv_blocks_free_ = AddGauge(r, "kvserve_kv_blocks_free",
                             "KV blocks no running request holds (evictable ones included).");
  kv_blocks_used_ =
      AddGauge(r, "kvserve_kv_blocks_used", "KV blocks held by at least one running request.");
  kv_blocks_cached_evictable_ =
      AddGauge(r, "kvserve_kv_blocks_cached_evictable",
               "Free KV blocks that still hold a cached prefix (reclaimed on demand, LRU).");
  kv_cache_usage_ratio_ = AddGauge(r, "kvserve_kv_cache_usage_ratio",
                                   "Fraction of KV blocks held by running requests: used / total.");
  kv_block_size_ = AddGauge(r, "kvserve_kv_block_size_tokens", "Tokens per KV cache block.");
  kv_host_blocks_total_ = AddGauge(r, "kvserve_kv_host_blocks_capacity",
                                   "KV blocks the host tier holds at most (0: no host tier).");
  kv_host_blocks_cached_ = AddGauge(r, "kvserve_kv_host_blocks_cached",
                                    "Host-tier KV blocks holding a cached prefix block.");
  requests_running_ = AddGauge(r, "kvserve_requests_running",
                               "Requests with at least one sequence in the running batch.");
  requests_waiting_ =
      AddGauge(r, "kvserve_requests_waiting", "Requests queued in the scheduler, not running.");
  draining_ = AddGauge(r, "kvserve_draining", "1 while the worker drains after SIGTERM, else 0.");

  prefix_cache_queried_tokens_ =
      AddCounter(r, "kvserve_prefix_cache_queried_tokens_total",
                 "Prompt tokens looked up in the prefix cache at admission.");
  prefix_cache_hit_tokens_ = AddCounter(r, "kvserve_prefix_cache_hit_tokens_total",
                                        "Prompt tokens served from the prefix cache.");
  prefix_cache_host_hit_tokens_ =
      AddCounter(r, "kvserve_prefix_cache_host_hit_tokens_total",
                 "Prompt tokens served from the prefix cache's host tier (copied back).");
  prometheus::Family<prometheus::Counter>& host_copies =
      prometheus::BuildCounter()
          .Name("kvserve_kv_host_copies_total")
          .Help("KV blocks copied between the device pool and the host tier, by direction.")
          .Register(r);
  kv_host_stores_ = &host_copies.Add({{"direction", "to_host"}});
  kv_host_loads_ = &host_copies.Add({{"direction", "to_device"}});
  kv_host_load_waits_ =
      AddCounter(r, "kvserve_kv_host_load_waits_total",
                 "Steps whose forward waited for host-tier loads issued in that step (loads that "
                 "did not overlap compute: --defer_host_loads=false, or nothing else to run).");
  prometheus::Family<prometheus::Counter>& transfer_blocks =
      prometheus::BuildCounter()
          .Name("kvserve_kv_transfer_blocks_total")
          .Help("KV blocks moved between workers, by direction (sent, or received and verified).")
          .Register(r);
  kv_transfer_blocks_sent_ = &transfer_blocks.Add({{"direction", "sent"}});
  kv_transfer_blocks_received_ = &transfer_blocks.Add({{"direction", "received"}});
  kv_fetches_ = &prometheus::BuildCounter()
                     .Name("kvserve_kv_fetches_total")
                     .Help(
                         "KV block fetches from other workers, by result (complete, partial, "
                         "failed).")
                     .Register(r);
  kv_fetch_duration_ = AddHistogram(
      r, "kvserve_kv_fetch_duration_seconds", "Wall time of one KV block fetch, import included.",
      {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  preemptions_ = AddCounter(r, "kvserve_preemptions_total",
                            "Running sequences preempted (blocks freed, recomputed later).");
  prompt_tokens_ = AddCounter(r, "kvserve_prompt_tokens_total",
                              "Prompt tokens of finished requests (cached ones included).");
  cached_prompt_tokens_ = AddCounter(r, "kvserve_cached_prompt_tokens_total",
                                     "Prompt tokens of finished requests served from the cache.");
  generation_tokens_ = AddCounter(r, "kvserve_generation_tokens_total",
                                  "Tokens generated, summed over choices, of finished requests.");
  steps_ = AddCounter(r, "kvserve_engine_steps_total", "Engine steps executed.");
  requests_finished_ = &prometheus::BuildCounter()
                            .Name("kvserve_requests_finished_total")
                            .Help("Requests that left the engine, by finish reason.")
                            .Register(r);
  requests_rejected_ = &prometheus::BuildCounter()
                            .Name("kvserve_requests_rejected_total")
                            .Help("Requests refused before reaching the engine, by status code.")
                            .Register(r);

  time_to_first_token_ =
      AddHistogram(r, "kvserve_time_to_first_token_seconds", "Submit to the first generated token.",
                   {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60});
  inter_token_latency_ = AddHistogram(
      r, "kvserve_inter_token_latency_seconds", "Time between consecutive tokens of a choice.",
      {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5});
  e2e_latency_ = AddHistogram(r, "kvserve_e2e_request_latency_seconds",
                              "Submit to the request's end (finish, cancel or abort).",
                              {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300});
  queue_time_ = AddHistogram(r, "kvserve_request_queue_time_seconds",
                             "Submit to the request's first scheduled step.",
                             {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60});
  step_duration_ =
      AddHistogram(r, "kvserve_step_duration_seconds",
                   "Wall time of one engine step (schedule, execute, update).",
                   {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5});
  step_tokens_ = AddHistogram(r, "kvserve_step_tokens", "Tokens the model computed in one step.",
                              {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192});
  step_sequences_ = AddHistogram(r, "kvserve_step_sequences", "Sequences batched in one step.",
                                 {1, 2, 4, 8, 16, 32, 64, 128, 256});
  const Histogram::BucketBoundaries tp_buckets = {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                                  0.005,   0.01,   0.025,   0.05,   0.1,   0.25};
  tp_plan_broadcast_ = AddHistogram(
      r, "kvserve_tp_plan_broadcast_seconds",
      "Tensor-parallel leader: time to broadcast one step's plan to the followers.", tp_buckets);
  tp_allreduce_ = AddHistogram(
      r, "kvserve_tp_allreduce_seconds",
      "Tensor-parallel leader: all-reduce time of one step (the sum over its calls).", tp_buckets);
  // Every known label value present at 0 from the start, so rate() and alerts work at once.
  for (const char* reason : {"stop", "stop_string", "length", "abort", "cancelled"}) {
    FinishedCounter(reason);
  }
  for (absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kResourceExhausted,
        absl::StatusCode::kUnavailable, absl::StatusCode::kNotFound,
        absl::StatusCode::kAlreadyExists, absl::StatusCode::kDeadlineExceeded}) {
    RejectedCounter(code);
  }
  for (const char* result : {"complete", "partial", "failed"}) {
    kv_fetches_->Add({{"result", result}});
  }
}

WorkerMetrics::~WorkerMetrics() {
  if (step_log_ != nullptr) std::fclose(step_log_);
}

void WorkerMetrics::SetStatsSource(std::function<EngineStats()> source) {
  absl::MutexLock lock(&mu_);
  stats_source_ = std::move(source);
}

void WorkerMetrics::UpdateCapacity(const EngineStats& stats) { ApplyCapacity(stats); }

void WorkerMetrics::ApplyCapacity(const EngineStats& stats) const {
  kv_blocks_total_->Set(static_cast<double>(stats.total_blocks));
  kv_blocks_free_->Set(static_cast<double>(stats.free_blocks));
  kv_blocks_used_->Set(static_cast<double>(stats.used_blocks));
  kv_blocks_cached_evictable_->Set(static_cast<double>(stats.evictable_blocks));
  kv_cache_usage_ratio_->Set(stats.total_blocks > 0 ? static_cast<double>(stats.used_blocks) /
                                                          static_cast<double>(stats.total_blocks)
                                                    : 0.0);
  kv_block_size_->Set(stats.block_size);
  kv_host_blocks_total_->Set(static_cast<double>(stats.host_blocks));
  kv_host_blocks_cached_->Set(static_cast<double>(stats.host_cached_blocks));
  requests_running_->Set(stats.running_requests);
  requests_waiting_->Set(stats.waiting_requests);
  draining_->Set(stats.draining ? 1 : 0);
}

void WorkerMetrics::RecordRejected(absl::StatusCode code) { RejectedCounter(code).Increment(); }

prometheus::Counter& WorkerMetrics::RejectedCounter(absl::StatusCode code) {
  return requests_rejected_->Add({{"code", absl::AsciiStrToLower(absl::StatusCodeToString(code))}});
}

prometheus::Counter& WorkerMetrics::FinishedCounter(absl::string_view reason) {
  return requests_finished_->Add({{"reason", std::string(reason)}});
}

absl::Status WorkerMetrics::OpenStepLog(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("--step_log: cannot open ", path));
  }
  if (std::ftell(file) == 0) {
    std::fputs(
        "duration_ms,prefill_tokens,decode_tokens,seqs,prefill_attended_tokens,"
        "decode_context_tokens\n",
        file);
  }
  if (step_log_ != nullptr) std::fclose(step_log_);
  step_log_ = file;
  return absl::OkStatus();
}

void WorkerMetrics::OnStep(const StepMetrics& step) {
  if (step_log_ != nullptr) {
    std::fprintf(step_log_, "%.4f,%d,%d,%d,%lld,%lld\n", absl::ToDoubleMilliseconds(step.duration),
                 step.num_prefill_tokens, step.num_decode_tokens, step.num_seqs,
                 static_cast<long long>(step.num_prefill_attended_tokens),
                 static_cast<long long>(step.num_decode_context_tokens));
    std::fflush(step_log_);
  }
  steps_->Increment();
  kv_host_stores_->Increment(step.num_host_stores);
  kv_host_loads_->Increment(step.num_host_loads);
  if (step.waited_for_host_loads) kv_host_load_waits_->Increment();
  step_duration_->Observe(Seconds(step.duration));
  step_tokens_->Observe(step.num_scheduled_tokens);
  step_sequences_->Observe(step.num_seqs);
  requests_running_->Set(step.num_running_requests);
  requests_waiting_->Set(step.num_waiting_requests);
}

void WorkerMetrics::RecordTensorParallelStep(absl::Duration broadcast, absl::Duration all_reduce) {
  tp_plan_broadcast_->Observe(Seconds(broadcast));
  tp_allreduce_->Observe(Seconds(all_reduce));
}

void WorkerMetrics::OnRequestFinished(const RequestMetrics& request) {
  // A client cancel, deadline or router abort reaches the engine as Abort: "cancelled". The
  // engine ending a choice itself (drain) is the finish reason "abort".
  FinishedCounter(request.aborted ? "cancelled" : FinishReasonName(request.finish_reason))
      .Increment();
  prompt_tokens_->Increment(request.prompt_tokens);
  cached_prompt_tokens_->Increment(request.cached_prompt_tokens);
  generation_tokens_->Increment(request.completion_tokens);
  if (request.completion_tokens > 0) {
    time_to_first_token_->Observe(Seconds(request.time_to_first_token));
  }
  e2e_latency_->Observe(Seconds(request.e2e_latency));
  if (request.queue_time > absl::ZeroDuration()) queue_time_->Observe(Seconds(request.queue_time));
  LogRequestDone(request);
}

void WorkerMetrics::OnTokenEmitted(absl::Duration inter_token_latency) {
  inter_token_latency_->Observe(Seconds(inter_token_latency));
}

void WorkerMetrics::OnPreemption() { preemptions_->Increment(); }

void WorkerMetrics::RecordKvTransferBlocks(bool sent, int64_t blocks) {
  (sent ? kv_transfer_blocks_sent_ : kv_transfer_blocks_received_)
      ->Increment(static_cast<double>(blocks));
}

void WorkerMetrics::RecordKvFetch(absl::string_view result, absl::Duration duration) {
  kv_fetches_->Add({{"result", std::string(result)}}).Increment();
  kv_fetch_duration_->Observe(Seconds(duration));
}

void WorkerMetrics::OnPrefixCacheQuery(int64_t query_tokens, int64_t hit_tokens,
                                       int64_t host_hit_tokens) {
  prefix_cache_queried_tokens_->Increment(static_cast<double>(query_tokens));
  prefix_cache_hit_tokens_->Increment(static_cast<double>(hit_tokens));
  prefix_cache_host_hit_tokens_->Increment(static_cast<double>(host_hit_tokens));
}

std::vector<prometheus::MetricFamily> WorkerMetrics::Collect() const {
  std::function<EngineStats()> source;
  {
    absl::MutexLock lock(&mu_);
    source = stats_source_;
  }
  if (source) ApplyCapacity(source());
  return registry_->Collect();
}

std::string WorkerMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(Collect());
}

}  // namespace kvserve
