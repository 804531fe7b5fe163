// Helpers for tests of tensor-parallel groups in one process: every rank is a thread with its
// own communicator (Gloo over loopback TCP, joined through a rendezvous store on a free port),
// as separate processes would have.
#ifndef KVSERVE_TESTS_MODEL_TENSOR_PARALLEL_TEST_UTIL_H_
#define KVSERVE_TESTS_MODEL_TENSOR_PARALLEL_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "comm/comm_options.h"
#include "comm/communicator.h"
#include "comm/gloo_communicator.h"
#include "comm/store_server.h"
#include "gtest/gtest.h"

namespace kvserve::testing {

// Runs fn(rank) for every rank in [0, size), each on its own thread, and waits for all.
inline void RunRanks(int size, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int rank = 1; rank < size; ++rank) threads.emplace_back(fn, rank);
  fn(0);
  for (std::thread& thread : threads) thread.join();
}

// A Gloo group of `size` ranks on 127.0.0.1: element r is rank r's communicator. Empty (and a
// test failure) when the group cannot form. `timeout` bounds every collective.
inline std::vector<std::unique_ptr<Communicator>> MakeGlooGroup(
    int size, absl::Duration timeout = absl::Seconds(60)) {
  absl::StatusOr<std::unique_ptr<StoreServer>> store = StoreServer::Start("127.0.0.1:0");
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  std::vector<std::unique_ptr<Communicator>> comms(size);
  RunRanks(size, [&](int rank) {
    CommOptions options;
    options.rank = rank;
    options.size = size;
    options.leader_address = (*store)->address();
    options.server = rank == 0 ? store->get() : nullptr;
    options.timeout = timeout;
    options.hostname = "127.0.0.1";
    absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(options);
    EXPECT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
    if (comm.ok()) comms[rank] = *std::move(comm);
  });
  for (const auto& comm : comms) {
    if (comm == nullptr) return {};
  }
  return comms;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_MODEL_TENSOR_PARALLEL_TEST_UTIL_H_
