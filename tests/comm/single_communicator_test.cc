// SingleCommunicator: the group of one rank passes every collective check, leaves all-reduced
// data as it is, copies AllGather's input (through the backend when given one), and refuses the
// arguments no group could take.
#include "comm/single_communicator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "tests/comm/collective_checks.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;

TEST(SingleCommunicatorTest, PassesTheCollectiveChecks) {
  SingleCommunicator communicator;
  EXPECT_EQ(communicator.rank(), 0);
  EXPECT_EQ(communicator.size(), 1);
  EXPECT_STREQ(communicator.name(), "single");
  KVSERVE_EXPECT_OK(testing::RunCollectiveChecks(communicator));
}

TEST(SingleCommunicatorTest, AllReduceLeavesTheDataAsItIs) {
  SingleCommunicator communicator;
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  KVSERVE_ASSERT_OK(communicator.AllReduceSum(data.data(), 3, kernels::DType::kF32));
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(SingleCommunicatorTest, AllGatherCopiesThroughTheBackend) {
  kernels::cpu::CpuBackend backend(1);
  SingleCommunicator communicator(&backend);
  const std::vector<uint8_t> in = {1, 2, 3, 4};
  std::vector<uint8_t> out(4, 0);
  KVSERVE_ASSERT_OK(communicator.AllGather(in.data(), out.data(), in.size()));
  EXPECT_EQ(out, in);
}

TEST(SingleCommunicatorTest, RefusesOtherDTypesAndRoots) {
  SingleCommunicator communicator;
  uint16_t half = 0;
  EXPECT_THAT(communicator.AllReduceSum(&half, 1, kernels::DType::kF16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(communicator.AllReduceSum(&half, -1, kernels::DType::kBF16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(communicator.Broadcast(&half, 2, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  KVSERVE_EXPECT_OK(communicator.Broadcast(&half, 2, 0));
}

}  // namespace
}  // namespace kvserve
