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

namespace kvserve {
namespace {

absl::Time Deadline(absl::Duration from_now = absl::Seconds(10)) { return absl::Now() + from_now; }

std::unique_ptr<StoreServer> StartServer() {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("127.0.0.1:0");
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// A port nothing listens on: one the kernel handed out and that was closed again.
int ClosedPort() {
  int port = 0;
  absl::StatusOr<net::Socket> socket = net::Listen({"127.0.0.1", 0}, &port);
  EXPECT_TRUE(socket.ok());
  return port;
}

TEST(HostPortTest, ParsesNamesIpv4AndBracketedIpv6) {
  absl::StatusOr<net::HostPort> name = net::ParseHostPort("leader.svc:29500");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->host, "leader.svc");
  EXPECT_EQ(name->port, 29500);
  absl::StatusOr<net::HostPort> v6 = net::ParseHostPort("[::1]:80");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(net::FormatHostPort(*v6), "[::1]:80");
  for (const char* bad : {"", "host", "host:", "host:65536", "host:-1", "::1:80", "[::1]80"}) {
    EXPECT_EQ(net::ParseHostPort(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(StoreTest, GetReturnsWhatWasSetIncludingBinaryValues) {
  std::unique_ptr<StoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string value("a\0b\xff", 4);
  ASSERT_TRUE((*client)->Set("key", value, Deadline()).ok());
  absl::StatusOr<std::string> got = (*client)->Get("key", Deadline());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  EXPECT_EQ(*(*client)->Contains("key"), true);
  EXPECT_EQ(*(*client)->Contains("other"), false);
}

TEST(StoreTest, GetWaitsForAKeySetLaterByAnotherClient) {
  std::unique_ptr<StoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    absl::StatusOr<std::unique_ptr<StoreClient>> client =
        StoreClient::Connect(server->address(), Deadline());
    ASSERT_TRUE(client.ok());
    EXPECT_TRUE((*client)->Set("late", "value", Deadline()).ok());
  });
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::string> got = (*client)->Get("late", Deadline());
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "value");
}

TEST(StoreTest, GetOfAKeyNobodySetsEndsAtTheDeadline) {
  std::unique_ptr<StoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  ASSERT_TRUE(client.ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = (*client)->Get("never", Deadline(absl::Milliseconds(300)));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("never"), std::string::npos) << got.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(StoreTest, StoppingTheServerEndsAWaitingGetWithUnavailable) {
  std::unique_ptr<StoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  ASSERT_TRUE(client.ok());
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    server.reset();
  });
  absl::StatusOr<std::string> got = (*client)->Get("never", Deadline(absl::Seconds(30)));
  stopper.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
}

TEST(StoreTest, AbortAnswersWaitingAndLaterGetsWithItsStatusButKeepsSetKeys) {
  std::unique_ptr<StoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(server->address(), Deadline());
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Set("set", "value", Deadline()).ok());
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(200));
    server->Abort(absl::DeadlineExceededError("rank 3 of 4 did not join"));
  });
  absl::StatusOr<std::string> waiting = (*client)->Get("never", Deadline(absl::Seconds(30)));
  aborter.join();
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kDeadlineExceeded) << waiting.status();
  EXPECT_NE(waiting.status().message().find("aborted: rank 3 of 4 did not join"),
            std::string::npos)
      << waiting.status();
  EXPECT_EQ((*client)->Get("other", Deadline()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(*(*client)->Get("set", Deadline()), "value");
}

TEST(StoreTest, ConnectingWhereNobodyListensEndsAtTheDeadline) {
  const std::string address = "127.0.0.1:" + std::to_string(ClosedPort());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(address, Deadline(absl::Milliseconds(400)));
  EXPECT_EQ(client.status().code(), absl::StatusCode::kDeadlineExceeded) << client.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

CommOptions RankOptions(int rank, int size, StoreServer* server, absl::Duration connect_timeout) {
  CommOptions options;
  options.rank = rank;
  options.size = size;
  options.leader_address = server->address();
  options.server = rank == 0 ? server : nullptr;
  options.connect_timeout = connect_timeout;
  return options;
}

TEST(RendezvousTest, EveryRankJoinsAndSeesTheOthersKeys) {
  std::unique_ptr<StoreServer> server = StartServer();
  ASSERT_NE(server, nullptr);
  const int size = 4;
  std::vector<absl::Status> results(size);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Rendezvous>> rendezvous =
          Rendezvous::Join(RankOptions(rank, size, server.get(), absl::Seconds(10)), "test");
      if (!rendezvous.ok()) {
        results[rank] = rendezvous.status();
        return;
      }
      Rendezvous& r = **rendezvous;
      results[rank] = r.store().Set(r.Key("value/" + std::to_string(rank)), "x", r.deadline());
      for (int other = 0; other < size && results[rank].ok(); ++other) {
        results[rank] =
            r.store().Get(r.Key("value/" + std::to_string(other)), r.deadline()).status();
      }
    });
  }
  for (std::thread& rank : ranks) rank.join();
  for (int rank = 0; rank < size; ++rank) EXPECT_TRUE(results[rank].ok()) << results[rank];
}

TEST(RendezvousTest, ARankThatNeverJoinsIsNamedInDeadlineExceeded) {
  std::unique_ptr<StoreServer> server = StartServer();
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
    EXPECT_EQ(results[rank].code(), absl::StatusCode::kDeadlineExceeded) << results[rank];
    EXPECT_NE(results[rank].message().find("rank 2 of 4 did not join"), std::string::npos)
        << results[rank];
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
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_NE(status.message().find("is rank 0 running?"), std::string::npos) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

TEST(CommOptionsTest, NamesWhatIsWrong) {
  CommOptions options;
  options.leader_address = "127.0.0.1:1234";
  options.size = 2;
  EXPECT_TRUE(ValidateCommOptions(options).ok());
  CommOptions bad = options;
  bad.rank = 2;
  EXPECT_NE(ValidateCommOptions(bad).message().find("rank 2"), std::string::npos);
  bad = options;
  bad.leader_address = "127.0.0.1:0";
  EXPECT_NE(ValidateCommOptions(bad).message().find("port 0"), std::string::npos);
  bad = options;
  bad.leader_address = "nowhere";
  EXPECT_NE(ValidateCommOptions(bad).message().find("leader_address"), std::string::npos);
  bad = options;
  bad.timeout = absl::ZeroDuration();
  EXPECT_EQ(ValidateCommOptions(bad).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
