// CreateNcclCommunicator's checks before it touches the CUDA module, on any machine: a backend
// that is not CUDA and bad options are INVALID_ARGUMENT naming what is wrong.
#include <gtest/gtest.h>

#include <string>

#include "comm/nccl/nccl_communicator.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;

TEST(NcclFactoryTest, RefusesABackendThatIsNotCuda) {
  kernels::cpu::CpuBackend backend(1);
  CommOptions options;
  options.leader_address = "127.0.0.1:0";
  absl::Status status = CreateNcclCommunicator(options, &backend).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not cpu")));
  EXPECT_THAT(CreateNcclCommunicator(options, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NcclFactoryTest, RefusesBadOptionsFirst) {
  kernels::cpu::CpuBackend backend(1);
  CommOptions options;
  options.size = 2;
  options.rank = 5;
  options.leader_address = "127.0.0.1:1234";
  absl::Status status = CreateNcclCommunicator(options, &backend).status();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 5")));
}

}  // namespace
}  // namespace kvserve
