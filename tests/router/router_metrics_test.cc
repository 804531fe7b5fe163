// RouterMetrics: every family the router exports is documented in docs/metrics.md, the KV
// transfer counters count planned dispatches and their blocks, and the labelled counters are at 0
// before their first event.
#include "router/router_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "prometheus/metric_family.h"
#include "tests/metrics_doc.h"

namespace kvserve {
namespace {

// The value of the unlabelled counter `name`; -1 when there is none.
double CounterValue(const RouterMetrics& metrics, const std::string& name) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name == name && family.metric.size() == 1) return family.metric[0].counter.value;
  }
  return -1;
}

TEST(RouterMetricsTest, EveryFamilyIsDocumentedInDocsMetricsMd) {
  RouterMetrics metrics;
  // Give the labelled families a series each, so that every family is collected.
  WorkerSummary worker;
  worker.worker_id = "w";
  metrics.SetWorkers({worker});
  metrics.RecordRouted("w");
  metrics.RecordRejection("queue_full");
  metrics.RecordFinished("OK");
  const std::vector<prometheus::MetricFamily> families = metrics.registry()->Collect();
  EXPECT_GE(families.size(), 20u);
  testing::ExpectDocumented(families);
}

// The value of `name`{`label`="`value`"}; -1 when there is no such series.
double LabelledCounter(const RouterMetrics& metrics, const std::string& name,
                       const std::string& label, const std::string& value) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      for (const prometheus::ClientMetric::Label& pair : metric.label) {
        if (pair.name == label && pair.value == value) return metric.counter.value;
      }
    }
  }
  return -1;
}

TEST(RouterMetricsTest, CountersWithKnownLabelsAreAtZeroBeforeTheirFirstEvent) {
  RouterMetrics metrics;
  for (const char* reason :
       {"queue_full", "never_fits", "no_worker", "shutting_down", "unauthenticated",
        "invalid_argument", "deadline", "cancelled", "migrations_exhausted", "worker_error"}) {
    EXPECT_EQ(LabelledCounter(metrics, "kvserve_router_requests_rejected_total", "reason", reason),
              0)
        << reason;
  }
  for (const char* code : {"OK", "CANCELLED", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                           "RESOURCE_EXHAUSTED", "UNAVAILABLE", "UNAUTHENTICATED", "INTERNAL"}) {
    EXPECT_EQ(LabelledCounter(metrics, "kvserve_router_requests_finished_total", "code", code), 0)
        << code;
  }
  EXPECT_EQ(LabelledCounter(metrics, "kvserve_router_requests_routed_total", "worker", "w"), -1);
  WorkerSummary worker;
  worker.worker_id = "w";
  metrics.SetWorkers({worker});
  EXPECT_EQ(LabelledCounter(metrics, "kvserve_router_requests_routed_total", "worker", "w"), 0);
  metrics.RecordRejection("queue_full");
  EXPECT_EQ(
      LabelledCounter(metrics, "kvserve_router_requests_rejected_total", "reason", "queue_full"),
      1);
}

TEST(RouterMetricsTest, PlannedTransfersCountDispatchesAndBlocks) {
  RouterMetrics metrics;
  EXPECT_EQ(CounterValue(metrics, "kvserve_router_kv_transfers_planned_total"), 0);
  EXPECT_EQ(CounterValue(metrics, "kvserve_router_kv_transfer_blocks_planned_total"), 0);
  metrics.RecordTransferPlanned(16);
  metrics.RecordTransferPlanned(4);
  EXPECT_EQ(CounterValue(metrics, "kvserve_router_kv_transfers_planned_total"), 2);
  EXPECT_EQ(CounterValue(metrics, "kvserve_router_kv_transfer_blocks_planned_total"), 20);
}

}  // namespace
}  // namespace kvserve
