// ExpectDocumented: every metric family a component exports is named (in backquotes) in
// docs/metrics.md. The worker's and the router's metrics tests share it.
#ifndef KVSERVE_TESTS_METRICS_DOC_H_
#define KVSERVE_TESTS_METRICS_DOC_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "prometheus/metric_family.h"

namespace kvserve::testing {

inline void ExpectDocumented(const std::vector<prometheus::MetricFamily>& families) {
  std::ifstream doc(std::string(KVSERVE_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(doc) << "docs/metrics.md is missing";
  std::stringstream contents;
  contents << doc.rdbuf();
  for (const prometheus::MetricFamily& family : families) {
    EXPECT_THAT(contents.str(), ::testing::HasSubstr("`" + family.name + "`"))
        << family.name << " is not documented in docs/metrics.md";
  }
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_METRICS_DOC_H_
