// CreateNcclCommunicator's checks before it touches the CUDA module, on any machine: a backend
// that is not CUDA and bad options are INVALID_ARGUMENT naming what is wrong.
#include <gtest/gtest.h>

#include <string>

#include "comm/nccl/nccl_communicator.h"
#include "kernels/cpu/cpu_backend.h"

namespace kvserve {
namespace {

TEST(NcclFactoryTest, RefusesABackendThatIsNotCuda) {
  kernels::cpu::CpuBackend backend(1);
  CommOptions options;
  options.leader_address = "127.0.0.1:0";
  absl::Status status = CreateNcclCommunicator(options, &backend).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("not cpu"), std::string::npos) << status;
  EXPECT_EQ(CreateNcclCommunicator(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NcclFactoryTest, RefusesBadOptionsFirst) {
  kernels::cpu::CpuBackend backend(1);
  CommOptions options;
  options.size = 2;
  options.rank = 5;
  options.leader_address = "127.0.0.1:1234";
  absl::Status status = CreateNcclCommunicator(options, &backend).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("rank 5"), std::string::npos) << status;
}

}  // namespace
}  // namespace kvserve
