// The Gloo communicator with its ranks as threads of one process, over TCP on loopback: every
// collective check at 2, 3, 4 and 8 ranks; the leader starting the store at its own address;
// a rank that never joins (DEADLINE_EXCEEDED naming it); a peer that stops calling (DEADLINE_
// EXCEEDED within the timeout, then every later call refused); a peer whose communicator is
// gone (UNAVAILABLE or DEADLINE_EXCEEDED, never a hang); bad arguments (INVALID_ARGUMENT, the
// group stays usable). Separate processes: gloo_process_test.cc.
#include "comm/gloo_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "comm/socket_io.h"
#include "comm/store_server.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/comm_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using testing::LoopbackOptions;
using testing::MakeGlooGroup;
using testing::RunGlooGroup;
using testing::RunRanks;
using testing::StartLoopbackStore;

// How a collective fails when a peer is gone: UNAVAILABLE or DEADLINE_EXCEEDED.
::testing::Matcher<absl::Status> IsPeerFailure() {
  return StatusIs(AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded));
}

class GlooGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooGroupTest, CollectivesGiveExactSumsRankOrderAndTheRootsBytes) {
  const int size = GetParam();
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  std::vector<absl::Status> results = RunGlooGroup(
      size, [&](int rank) { return LoopbackOptions(rank, size, server.get()); },
      [&](int rank, Communicator& communicator) {
        EXPECT_EQ(communicator.rank(), rank);
        EXPECT_EQ(communicator.size(), size);
        EXPECT_STREQ(communicator.name(), "gloo");
        return testing::RunCollectiveChecks(communicator);
      });
  for (int rank = 0; rank < size; ++rank) KVSERVE_EXPECT_OK(results[rank]);
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooGroupTest, ::testing::Values(2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(GlooCommunicatorTest, LeaderStartsTheStoreAtItsOwnAddress) {
  // A port the kernel just handed out and took back: free unless another process grabs it in
  // between (the other tests hand rank 0 a running server instead).
  int port = 0;
  KVSERVE_ASSERT_OK(net::Listen({"127.0.0.1", 0}, &port));
  const std::string leader = "127.0.0.1:" + std::to_string(port);
  std::vector<absl::Status> results = RunGlooGroup(
      2,
      [&](int rank) {
        CommOptions options;
        options.rank = rank;
        options.size = 2;
        options.leader_address = leader;
        options.hostname = "127.0.0.1";
        return options;
      },
      [](int, Communicator& communicator) { return testing::RunCollectiveChecks(communicator); });
  KVSERVE_EXPECT_OK(results[0]);
  KVSERVE_EXPECT_OK(results[1]);
}

TEST(GlooCommunicatorTest, ARankThatNeverJoinsIsNamedWithinTheConnectTimeout) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  const absl::Time start = absl::Now();
  std::vector<absl::Status> results(3);
  RunRanks(2, [&](int rank) {  // ranks 0 and 1 of 3: rank 2 never comes
    CommOptions options = LoopbackOptions(rank, 3, server.get());
    options.connect_timeout = absl::Seconds(1);
    results[rank] = CreateGlooCommunicator(options).status();
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int rank : {0, 1}) {
    EXPECT_THAT(results[rank], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        HasSubstr("rank 2 of 3 did not join")));
  }
}

TEST(GlooCommunicatorTest, APeerThatStopsCallingFailsTheCollectiveAtTheTimeoutThenEveryCall) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  absl::Notification rank0_done;
  absl::Duration waited;
  std::vector<absl::Status> results = RunGlooGroup(
      2, [&](int rank) { return LoopbackOptions(rank, 2, server.get(), absl::Milliseconds(500)); },
      [&](int rank, Communicator& communicator) -> absl::Status {
        if (rank == 1) {  // joined, then never calls: stays connected until rank 0 is done
          rank0_done.WaitForNotification();
          return absl::OkStatus();
        }
        std::vector<float> data(576, 1.0f);
        const absl::Time start = absl::Now();
        absl::Status status = communicator.AllReduceSum(data.data(), 576, kernels::DType::kF32);
        waited = absl::Now() - start;
        absl::Status later = communicator.Barrier();
        EXPECT_EQ(later, status);
        EXPECT_EQ(communicator.AllGather(data.data(), data.data(), 4), status);
        rank0_done.Notify();
        return status;
      });
  EXPECT_THAT(results[0], StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(waited, absl::Milliseconds(400));
  EXPECT_LT(waited, absl::Seconds(3));
  KVSERVE_EXPECT_OK(results[1]);
}

TEST(GlooCommunicatorTest, APeerWhoseCommunicatorIsGoneFailsTheOthersWithoutAHang) {
  const int size = 3;
  std::vector<std::unique_ptr<Communicator>> communicators = MakeGlooGroup(size, absl::Seconds(2));
  ASSERT_EQ(communicators.size(), static_cast<size_t>(size));
  communicators[1].reset();  // closes rank 1's connections
  std::vector<absl::Status> results(size);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int rank : {0, 2}) {
    threads.emplace_back([&, rank] {
      std::vector<float> data(1 << 16, 1.0f);
      results[rank] = communicators[rank]->AllReduceSum(data.data(), 1 << 16, kernels::DType::kF32);
      EXPECT_EQ(communicators[rank]->Barrier(), results[rank]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  for (int rank : {0, 2}) EXPECT_THAT(results[rank], IsPeerFailure());
}

TEST(GlooCommunicatorTest, BadArgumentsAreRefusedOnTheCallingRankAndTheGroupStaysUsable) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  std::vector<absl::Status> results = RunGlooGroup(
      2, [&](int rank) { return LoopbackOptions(rank, 2, server.get()); },
      [](int, Communicator& communicator) -> absl::Status {
        uint16_t half = 0;
        EXPECT_THAT(communicator.AllReduceSum(&half, 1, kernels::DType::kF16),
                    StatusIs(absl::StatusCode::kInvalidArgument));
        EXPECT_THAT(communicator.Broadcast(&half, 2, 2),
                    StatusIs(absl::StatusCode::kInvalidArgument));
        EXPECT_THAT(communicator.Broadcast(&half, 2, -1),
                    StatusIs(absl::StatusCode::kInvalidArgument));
        return testing::RunCollectiveChecks(communicator);
      });
  KVSERVE_EXPECT_OK(results[0]);
  KVSERVE_EXPECT_OK(results[1]);
}

TEST(GlooCommunicatorTest, ASingleRankGroupNeedsNoPeers) {
  CommOptions options;
  options.leader_address = "127.0.0.1:0";  // port 0 is fine when nobody has to find it
  options.hostname = "127.0.0.1";
  absl::StatusOr<std::unique_ptr<Communicator>> communicator = CreateGlooCommunicator(options);
  KVSERVE_ASSERT_OK(communicator);
  KVSERVE_EXPECT_OK(testing::RunCollectiveChecks(**communicator));
}

}  // namespace
}  // namespace kvserve
