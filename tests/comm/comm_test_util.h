// Helpers of the communicator tests: a group of ranks run as threads of this process against a
// store server on loopback, each thread making its rank's communicator and running a body.
#ifndef KVSERVE_TESTS_COMM_COMM_TEST_UTIL_H_
#define KVSERVE_TESTS_COMM_COMM_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/comm_options.h"
#include "comm/gloo_communicator.h"
#include "comm/store_server.h"

namespace kvserve::testing {

// Options of `rank` in a loopback group whose store is `server` (rank 0 is handed the server).
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

// Runs size threads; thread r makes rank r's Gloo communicator from options(r) and, when that
// worked, calls body(r, communicator). Returns each rank's result: the factory's error, or
// what body returned.
inline std::vector<absl::Status> RunGlooGroup(
    int size, const std::function<CommOptions(int)>& options,
    const std::function<absl::Status(int, Communicator&)>& body) {
  std::vector<absl::Status> results(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Communicator>> communicator =
          CreateGlooCommunicator(options(rank));
      results[rank] = communicator.ok() ? body(rank, **communicator) : communicator.status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_COMM_COMM_TEST_UTIL_H_
