// RouterMetrics: every family the router exports is documented in docs/metrics.md, and the KV
// transfer counters count planned dispatches and their blocks.
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
