// The rendezvous pieces: host:port parsing, the store server and client (a get waits for a
// later set, a get or a connection gives up at its deadline, a stopped server is UNAVAILABLE,
// an aborted one answers with the abort's status),
// and Rendezvous::Join (every rank joins; a rank that never joins is named in
// DEADLINE_EXCEEDED; a leader that never starts is DEADLINE_EXCEEDED).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/comm_options.h"
#include "comm/rendezvous.h"
#include "comm/socket_io.h"
#include "comm/store_client.h"
#include "comm/store_server.h"
#include "tests/comm/comm_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::LoopbackOptions;
using ::kvserve::testing::RunRanks;
using ::kvserve::testing::StartLoopbackStore;
using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::_;

absl::Time Deadline(absl::Duration from_now = absl::Seconds(10)) { return absl::Now() + from_now; }

// A port nothing listens on: one the kernel handed out and that was closed again.
int ClosedPort() {
  int port = 0;
  absl::StatusOr<net::Socket> socket = net::Listen({"127.0.0.1", 0}, &port);
  KVSERVE_EXPECT_OK(socket);
  return port;
}

TEST(HostPortTest, ParsesNamesIpv4AndBracketedIpv6) {
  absl::StatusOr<net::HostPort> name = net::ParseHostPort("leader.svc:29500");
  KVSERVE_ASSERT_OK(name);
  EXPECT_EQ(name->host, "leader.svc");
  EXPECT_EQ(name->port, 29500);
  absl::StatusOr<net::HostPort> v6 = net::ParseHostPort("[::1]:80");
  KVSERVE_ASSERT_OK(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(net::FormatHostPort(*v6), "[::1]:80");
  for (const char* bad : {"", "host", "host:", "host:65536", "host:-1", "::1:80", "[::1]80"}) {
    EXPECT_THAT(net::ParseHostPort(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(StoreTest, GetReturnsWhatWasSetIncludingBinaryValues) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  KVSERVE_ASSERT_OK(client);
  const std::string value("a\0b\xff", 4);
  KVSERVE_ASSERT_OK((*client)->Set("key", value, Deadline()));
  absl::StatusOr<std::string> got = (*client)->Get("key", Deadline());
  KVSERVE_ASSERT_OK(got);
  EXPECT_EQ(*got, value);
  EXPECT_EQ(*(*client)->Contains("key"), true);
  EXPECT_EQ(*(*client)->Contains("other"), false);
}

TEST(StoreTest, GetWaitsForAKeySetLaterByAnotherClient) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    absl::StatusOr<std::unique_ptr<StoreClient>> client =
        StoreClient::Connect(server->address(), Deadline());
    KVSERVE_ASSERT_OK(client);
    KVSERVE_EXPECT_OK((*client)->Set("late", "value", Deadline()));
  });
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  KVSERVE_ASSERT_OK(client);
  absl::StatusOr<std::string> got = (*client)->Get("late", Deadline());
  setter.join();
  KVSERVE_ASSERT_OK(got);
  EXPECT_EQ(*got, "value");
}

TEST(StoreTest, GetOfAKeyNobodySetsEndsAtTheDeadline) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  KVSERVE_ASSERT_OK(client);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = (*client)->Get("never", Deadline(absl::Milliseconds(300)));
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("never")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(StoreTest, StoppingTheServerEndsAWaitingGetWithUnavailable) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  KVSERVE_ASSERT_OK(client);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    server.reset();
  });
  absl::StatusOr<std::string> got = (*client)->Get("never", Deadline(absl::Seconds(30)));
  stopper.join();
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kUnavailable));
}

TEST(StoreTest, AbortAnswersWaitingAndLaterGetsWithItsStatusButKeepsSetKeys) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  KVSERVE_ASSERT_OK(client);
  KVSERVE_ASSERT_OK((*client)->Set("set", "value", Deadline()));
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    server->Abort(absl::DeadlineExceededError("rank 3 of 4 did not join"));
  });
  absl::StatusOr<std::string> waiting = (*client)->Get("never", Deadline(absl::Seconds(30)));
  aborter.join();
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                HasSubstr("aborted: rank 3 of 4 did not join")));
  EXPECT_THAT((*client)->Get("other", Deadline()), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(*(*client)->Get("set", Deadline()), "value");
}

TEST(StoreTest, ConnectingWhereNobodyListensEndsAtTheDeadline) {
  const std::string address = "127.0.0.1:" + std::to_string(ClosedPort());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(address, Deadline(absl::Milliseconds(400)));
  EXPECT_THAT(client, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// Options of `rank` in a loopback group that gives up joining after `connect_timeout`.
CommOptions RankOptions(int rank, int size, StoreServer* server, absl::Duration connect_timeout) {
  CommOptions options = LoopbackOptions(rank, size, server);
  options.connect_timeout = connect_timeout;
  return options;
}

TEST(RendezvousTest, EveryRankJoinsAndSeesTheOthersKeys) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  const int size = 4;
  std::vector<absl::Status> results(size);
  RunRanks(size, [&](int rank) {
    absl::StatusOr<std::unique_ptr<Rendezvous>> rendezvous =
        Rendezvous::Join(RankOptions(rank, size, server.get(), absl::Seconds(10)), "test");
    if (!rendezvous.ok()) {
      results[rank] = rendezvous.status();
      return;
    }
    Rendezvous& r = **rendezvous;
    results[rank] = r.store().Set(r.Key("value/" + std::to_string(rank)), "x", r.deadline());
    for (int other = 0; other < size && results[rank].ok(); ++other) {
      results[rank] = r.store().Get(r.Key("value/" + std::to_string(other)), r.deadline()).status();
    }
  });
  for (int rank = 0; rank < size; ++rank) KVSERVE_EXPECT_OK(results[rank]);
}

TEST(RendezvousTest, ARankThatNeverJoinsIsNamedInDeadlineExceeded) {
  std::unique_ptr<StoreServer> server = StartLoopbackStore();
  ASSERT_NE(server, nullptr);
  const int size = 4;
  std::vector<absl::Status> results(size);
  std::vector<std::thread> ranks;
  const absl::Time start = absl::Now();
  for (int rank : {0, 1, 3}) {  // rank 2 never comes
    ranks.emplace_back([&, rank] {
      results[rank] =
          Rendezvous::Join(RankOptions(rank, size, server.get(), absl::Milliseconds(500)), "test")
              .status();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  for (int rank : {0, 1, 3}) {
    EXPECT_THAT(results[rank], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                        HasSubstr("rank 2 of 4 did not join")));
  }
}

TEST(RendezvousTest, AFollowerWhoseLeaderNeverStartsGetsDeadlineExceeded) {
  CommOptions options;
  options.rank = 1;
  options.size = 2;
  options.leader_address = "127.0.0.1:" + std::to_string(ClosedPort());
  options.connect_timeout = absl::Milliseconds(400);
  const absl::Time start = absl::Now();
  absl::Status status = Rendezvous::Join(options, "test").status();
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("is rank 0 running?")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(CommOptionsTest, NamesWhatIsWrong) {
  CommOptions options;
  options.leader_address = "127.0.0.1:1234";
  options.size = 2;
  KVSERVE_EXPECT_OK(ValidateCommOptions(options));
  CommOptions bad = options;
  bad.rank = 2;
  EXPECT_THAT(ValidateCommOptions(bad), StatusIs(_, HasSubstr("rank 2")));
  bad = options;
  bad.leader_address = "127.0.0.1:0";
  EXPECT_THAT(ValidateCommOptions(bad), StatusIs(_, HasSubstr("port 0")));
  bad = options;
  bad.leader_address = "nowhere";
  EXPECT_THAT(ValidateCommOptions(bad), StatusIs(_, HasSubstr("leader_address")));
  bad = options;
  bad.timeout = absl::ZeroDuration();
  EXPECT_THAT(ValidateCommOptions(bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace kvserve
