// SingleCommunicator: the group of one rank passes every collective check, leaves all-reduced
// data as it is, copies AllGather's input (through the backend when given one), and refuses the
// arguments no group could take.
#include "comm/single_communicator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "tests/comm/collective_checks.h"

namespace kvserve {
namespace {

TEST(SingleCommunicatorTest, PassesTheCollectiveChecks) {
  SingleCommunicator communicator;
  EXPECT_EQ(communicator.rank(), 0);
  EXPECT_EQ(communicator.size(), 1);
  EXPECT_STREQ(communicator.name(), "single");
  EXPECT_TRUE(testing::RunCollectiveChecks(communicator).ok());
}

TEST(SingleCommunicatorTest, AllReduceLeavesTheDataAsItIs) {
  SingleCommunicator communicator;
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(communicator.AllReduceSum(data.data(), 3, kernels::DType::kF32).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

TEST(SingleCommunicatorTest, AllGatherCopiesThroughTheBackend) {
  kernels::cpu::CpuBackend backend(1);
  SingleCommunicator communicator(&backend);
  const std::vector<uint8_t> in = {1, 2, 3, 4};
  std::vector<uint8_t> out(4, 0);
  ASSERT_TRUE(communicator.AllGather(in.data(), out.data(), in.size()).ok());
  EXPECT_EQ(out, in);
}

TEST(SingleCommunicatorTest, RefusesOtherDTypesAndRoots) {
  SingleCommunicator communicator;
  uint16_t half = 0;
  EXPECT_EQ(communicator.AllReduceSum(&half, 1, kernels::DType::kF16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(communicator.AllReduceSum(&half, -1, kernels::DType::kBF16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(communicator.Broadcast(&half, 2, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(communicator.Broadcast(&half, 2, 0).ok());
}

}  // namespace
}  // namespace kvserve
