// TimedBackend: the calls it forwards give what the wrapped backend gives, and only enabled
// calls are counted (with Linear's FLOPs).
#include "kernels/timed_backend.h"

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend_factory.h"

namespace kvserve::kernels {
namespace {

TEST(TimedBackendTest, ForwardsEveryCallAndCountsOnlyWhileEnabled) {
  std::string error;
  std::shared_ptr<Backend> cpu = CreateBackend("cpu", 2, &error);
  ASSERT_NE(cpu, nullptr) << error;
  TimedBackend timed(cpu);
  EXPECT_STREQ(timed.name(), cpu->name());

  constexpr int kTokens = 3, kIn = 32, kOut = 5;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(kTokens * kIn), w(kOut * kIn), want(kTokens * kOut), got(kTokens * kOut);
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  const LinearParams direct{x.data(), w.data(), nullptr, want.data(), kTokens, kIn, kOut};
  cpu->Linear(direct);
  LinearParams through = direct;
  through.y = got.data();

  timed.Linear(through);  // timing is off until enabled
  EXPECT_EQ(timed.totals(TimedOp::kLinear).calls, 0);
  EXPECT_EQ(got, want);

  timed.set_enabled(true);
  std::fill(got.begin(), got.end(), 0.0f);
  timed.Linear(through);
  timed.LinearSameInput(&through, 1);
  EXPECT_EQ(got, want);
  const OpTotals& linear = timed.totals(TimedOp::kLinear);
  EXPECT_EQ(linear.calls, 2);
  EXPECT_DOUBLE_EQ(linear.flops, 2 * 2.0 * kTokens * kIn * kOut);
  EXPECT_GT(linear.seconds, 0.0);
  EXPECT_DOUBLE_EQ(timed.total_seconds(), linear.seconds);
  EXPECT_EQ(timed.totals(TimedOp::kAttention).calls, 0);

  timed.Reset();
  EXPECT_EQ(timed.totals(TimedOp::kLinear).calls, 0);
  EXPECT_EQ(timed.total_seconds(), 0.0);
}

}  // namespace
}  // namespace kvserve::kernels
