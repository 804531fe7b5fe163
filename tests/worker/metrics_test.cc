// WorkerMetrics: values after observer callbacks, capacity read from the stats source at scrape
// time, and the Prometheus text format that /metrics serves (names as docs/metrics.md lists).
#include "worker/metrics.h"

#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/metrics_doc.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

// Parses the text format into series -> value ("name{labels}" as written, without spaces).
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) {
      ADD_FAILURE() << "unparsable sample line: " << line;
      continue;
    }
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

TEST(WorkerMetrics, ObserverCallbacksUpdateCountersAndHistograms) {
  WorkerMetrics metrics;
  metrics.OnPrefixCacheQuery(64, 48, 32);
  metrics.OnPrefixCacheQuery(16, 0, 0);
  metrics.OnPreemption();
  metrics.OnTokenEmitted(absl::Milliseconds(20));
  metrics.OnTokenEmitted(absl::Milliseconds(30));
  StepMetrics step;
  step.duration = absl::Milliseconds(7);
  step.num_scheduled_tokens = 40;
  step.num_seqs = 3;
  step.num_host_stores = 4;
  step.num_host_loads = 2;
  step.num_running_requests = 2;
  step.num_waiting_requests = 5;
  metrics.OnStep(step);
  RequestMetrics finished;
  finished.finish_reason = FinishReason::kLength;
  finished.prompt_tokens = 80;
  finished.cached_prompt_tokens = 48;
  finished.completion_tokens = 10;
  finished.time_to_first_token = absl::Milliseconds(150);
  finished.e2e_latency = absl::Milliseconds(600);
  finished.queue_time = absl::Milliseconds(2);
  metrics.OnRequestFinished(finished);
  RequestMetrics cancelled;
  cancelled.aborted = true;
  cancelled.finish_reason = FinishReason::kAbort;
  cancelled.prompt_tokens = 5;
  cancelled.e2e_latency = absl::Milliseconds(50);
  metrics.OnRequestFinished(cancelled);
  metrics.RecordRejected(absl::StatusCode::kInvalidArgument);

  const std::map<std::string, double> s = ParseSamples(metrics.Serialize());
  EXPECT_EQ(s.at("kvserve_prefix_cache_queried_tokens_total"), 80);
  EXPECT_EQ(s.at("kvserve_prefix_cache_hit_tokens_total"), 48);
  EXPECT_EQ(s.at("kvserve_prefix_cache_host_hit_tokens_total"), 32);
  EXPECT_EQ(s.at("kvserve_kv_host_copies_total{direction=\"to_host\"}"), 4);
  EXPECT_EQ(s.at("kvserve_kv_host_copies_total{direction=\"to_device\"}"), 2);
  EXPECT_EQ(s.at("kvserve_preemptions_total"), 1);
  EXPECT_EQ(s.at("kvserve_prompt_tokens_total"), 85);
  EXPECT_EQ(s.at("kvserve_cached_prompt_tokens_total"), 48);
  EXPECT_EQ(s.at("kvserve_generation_tokens_total"), 10);
  EXPECT_EQ(s.at("kvserve_requests_finished_total{reason=\"length\"}"), 1);
  EXPECT_EQ(s.at("kvserve_requests_finished_total{reason=\"cancelled\"}"), 1);
  EXPECT_EQ(s.at("kvserve_requests_finished_total{reason=\"stop\"}"), 0);
  EXPECT_EQ(s.at("kvserve_requests_rejected_total{code=\"invalid_argument\"}"), 1);
  EXPECT_EQ(s.at("kvserve_requests_running"), 2);
  EXPECT_EQ(s.at("kvserve_requests_waiting"), 5);
  EXPECT_EQ(s.at("kvserve_engine_steps_total"), 1);
  // TTFT is observed only for the request that produced tokens: 0.15 s falls in le=0.25.
  EXPECT_EQ(s.at("kvserve_time_to_first_token_seconds_count"), 1);
  EXPECT_DOUBLE_EQ(s.at("kvserve_time_to_first_token_seconds_sum"), 0.15);
  EXPECT_EQ(s.at("kvserve_time_to_first_token_seconds_bucket{le=\"0.1\"}"), 0);
  EXPECT_EQ(s.at("kvserve_time_to_first_token_seconds_bucket{le=\"0.25\"}"), 1);
  EXPECT_EQ(s.at("kvserve_inter_token_latency_seconds_count"), 2);
  EXPECT_DOUBLE_EQ(s.at("kvserve_inter_token_latency_seconds_sum"), 0.05);
  EXPECT_EQ(s.at("kvserve_inter_token_latency_seconds_bucket{le=\"0.025\"}"), 1);
  EXPECT_EQ(s.at("kvserve_e2e_request_latency_seconds_count"), 2);
  EXPECT_EQ(s.at("kvserve_request_queue_time_seconds_count"), 1);
  EXPECT_EQ(s.at("kvserve_step_duration_seconds_count"), 1);
  EXPECT_EQ(s.at("kvserve_step_tokens_bucket{le=\"32\"}"), 0);
  EXPECT_EQ(s.at("kvserve_step_tokens_bucket{le=\"64\"}"), 1);
  EXPECT_EQ(s.at("kvserve_step_sequences_sum"), 3);
}

TEST(WorkerMetrics, CapacityGaugesComeFromTheStatsSourceAtScrapeTime) {
  WorkerMetrics metrics;
  EngineStats stats;
  stats.block_size = 16;
  stats.total_blocks = 200;
  stats.used_blocks = 50;
  stats.free_blocks = 150;
  stats.evictable_blocks = 30;
  stats.host_blocks = 1000;
  stats.host_cached_blocks = 640;
  stats.running_requests = 4;
  stats.waiting_requests = 1;
  metrics.SetStatsSource([&stats] { return stats; });
  std::map<std::string, double> s = ParseSamples(metrics.Serialize());
  EXPECT_EQ(s.at("kvserve_kv_blocks_capacity"), 200);
  EXPECT_EQ(s.at("kvserve_kv_blocks_used"), 50);
  EXPECT_EQ(s.at("kvserve_kv_blocks_free"), 150);
  EXPECT_EQ(s.at("kvserve_kv_blocks_cached_evictable"), 30);
  EXPECT_EQ(s.at("kvserve_kv_host_blocks_capacity"), 1000);
  EXPECT_EQ(s.at("kvserve_kv_host_blocks_cached"), 640);
  EXPECT_DOUBLE_EQ(s.at("kvserve_kv_cache_usage_ratio"), 0.25);
  EXPECT_EQ(s.at("kvserve_kv_block_size_tokens"), 16);
  EXPECT_EQ(s.at("kvserve_requests_running"), 4);
  EXPECT_EQ(s.at("kvserve_draining"), 0);

  stats.used_blocks = 200;  // the next scrape sees the new value, no callback needed
  stats.free_blocks = 0;
  stats.draining = true;
  s = ParseSamples(metrics.Serialize());
  EXPECT_DOUBLE_EQ(s.at("kvserve_kv_cache_usage_ratio"), 1.0);
  EXPECT_EQ(s.at("kvserve_draining"), 1);
  metrics.SetStatsSource(nullptr);
}

TEST(WorkerMetrics, TextFormatHasHelpAndTypeForEveryFamily) {
  WorkerMetrics metrics;
  const std::string text = metrics.Serialize();
  EXPECT_THAT(text, HasSubstr("# TYPE kvserve_kv_cache_usage_ratio gauge"));
  EXPECT_THAT(text, HasSubstr("# TYPE kvserve_preemptions_total counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE kvserve_time_to_first_token_seconds histogram"));
  EXPECT_THAT(text, HasSubstr("kvserve_time_to_first_token_seconds_bucket{le=\"+Inf\"} 0"));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      const std::string name(line.substr(0, line.find(' ')));
      EXPECT_THAT(text, HasSubstr("# HELP " + name + " ")) << name;
    }
  }
}

TEST(WorkerMetrics, CountersWithKnownLabelsAreAtZeroBeforeTheirFirstEvent) {
  WorkerMetrics metrics;
  const std::map<std::string, double> s = ParseSamples(metrics.Serialize());
  for (const char* code : {"invalid_argument", "resource_exhausted", "unavailable", "not_found",
                           "already_exists", "deadline_exceeded"}) {
    const std::string series = absl::StrCat("kvserve_requests_rejected_total{code=\"", code, "\"}");
    ASSERT_TRUE(s.contains(series)) << series;
    EXPECT_EQ(s.at(series), 0) << series;
  }
  for (const char* result : {"complete", "partial", "failed"}) {
    const std::string series = absl::StrCat("kvserve_kv_fetches_total{result=\"", result, "\"}");
    ASSERT_TRUE(s.contains(series)) << series;
    EXPECT_EQ(s.at(series), 0) << series;
  }
}

TEST(WorkerMetrics, EveryFamilyIsDocumentedInDocsMetricsMd) {
  WorkerMetrics metrics;
  kvserve::testing::ExpectDocumented(metrics.Collect());
}

TEST(WorkerMetricsTest, NoGaugeOrHistogramEndsWithTotal) {
  // OpenMetrics (and promtool check metrics) reserve the _total suffix for counters; the pool
  // size gauge is kvserve_kv_blocks_capacity, not kvserve_kv_blocks_total.
  WorkerMetrics metrics;
  for (const prometheus::MetricFamily& family : metrics.Collect()) {
    if (family.type == prometheus::MetricType::Counter) continue;
    EXPECT_FALSE(family.name.size() >= 6 &&
                 family.name.compare(family.name.size() - 6, 6, "_total") == 0)
        << family.name;
  }
}

}  // namespace
}  // namespace kvserve
