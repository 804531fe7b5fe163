// Helpers for tests of a communicator group whose ranks are threads of this process, over TCP on
// loopback (127.0.0.1), as separate processes would be: a rendezvous store on a free port, each
// rank's options, the ranks' threads, and a whole Gloo group. The communicator tests use the
// pieces; the model and tensor-parallel tests take a formed group (MakeGlooGroup).
#ifndef KVSERVE_TESTS_COMM_COMM_TEST_UTIL_H_
#define KVSERVE_TESTS_COMM_COMM_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/comm_options.h"
#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store_server.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace kvserve::testing {

// A rendezvous store on 127.0.0.1 at a port the kernel picks. Null (and a test failure) when it
// cannot start.
inline std::unique_ptr<StoreServer> StartLoopbackStore() {
  absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start("127.0.0.1:0");
  KVSERVE_EXPECT_OK(server);
  return server.ok() ? *std::move(server) : nullptr;
}

// Options of `rank` in a loopback group whose store is `server` (rank 0 is handed the server).
// `timeout` bounds every collective.
inline CommOptions LoopbackOptions(int rank, int size, StoreServer* server,
                                   absl::Duration timeout = absl::Seconds(20)) {
  CommOptions options;
  options.rank = rank;
  options.size = size;
  options.leader_address = server->address();
  options.server = rank == 0 ? server : nullptr;
  options.timeout = timeout;
  options.connect_timeout = absl::Seconds(30);
  options.hostname = "127.0.0.1";
  return options;
}

// Runs fn(rank) for every rank in [0, size), each on its own thread (rank 0 on the caller's),
// and waits for all.
inline void RunRanks(int size, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int rank = 1; rank < size; ++rank) threads.emplace_back(fn, rank);
  fn(0);
  for (std::thread& thread : threads) thread.join();
}

// Runs the `size` ranks of a group at once (RunRanks): rank r makes its Gloo communicator from
// options(r) and, when that worked, calls body(r, communicator). Returns each rank's result:
// the factory's error, or what body returned.
inline std::vector<absl::Status> RunGlooGroup(
    int size, const std::function<CommOptions(int)>& options,
    const std::function<absl::Status(int, Communicator&)>& body) {
  std::vector<absl::Status> results(size);
  RunRanks(size, [&](int rank) {
    absl::StatusOr<std::unique_ptr<Communicator>> communicator =
        CreateGlooCommunicator(options(rank));
    results[rank] = communicator.ok() ? body(rank, **communicator) : communicator.status();
  });
  return results;
}

// A formed Gloo group of `size` ranks on a loopback store of its own (LoopbackOptions): element
// r is rank r's communicator. Empty (and a test failure) when the group cannot form. `timeout`
// bounds every collective.
inline std::vector<std::unique_ptr<Communicator>> MakeGlooGroup(
    int size, absl::Duration timeout = absl::Seconds(60)) {
  std::unique_ptr<StoreServer> store = StartLoopbackStore();
  if (store == nullptr) return {};
  std::vector<std::unique_ptr<Communicator>> comms(size);
  RunRanks(size, [&](int rank) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        CreateGlooCommunicator(LoopbackOptions(rank, size, store.get(), timeout));
    KVSERVE_EXPECT_OK(comm) << "rank " << rank;
    if (comm.ok()) comms[rank] = *std::move(comm);
  });
  for (const auto& comm : comms) {
    if (comm == nullptr) return {};
  }
  return comms;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_COMM_COMM_TEST_UTIL_H_
