// Rendezvous: how the ranks of a group find each other, knowing only the leader's address.
// Rank 0 runs the group's StoreServer (or uses the one it is given); every rank connects a
// StoreClient to it, announces itself under "<group>/joined/<rank>" and waits until every rank
// has. The communicator then exchanges what it needs through store() (Gloo: every rank's
// connection addresses; NCCL: rank 0's unique id) under keys made by Key().
//
// Errors from Join: DEADLINE_EXCEEDED when the leader cannot be reached, or when some ranks
// have not joined, within options.connect_timeout (the message names the missing ranks);
// UNAVAILABLE when the leader's store goes away; INVALID_ARGUMENT for bad options. When rank 0
// gives up (Join fails there, or Abort), it aborts the store with its error, so the ranks still
// waiting fail with it (e.g. which rank did not join) rather than with a closed connection.
// Thread-safety: one thread at a time.
#ifndef KVSERVE_COMM_RENDEZVOUS_H_
#define KVSERVE_COMM_RENDEZVOUS_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/comm_options.h"
#include "comm/store_client.h"
#include "comm/store_server.h"

namespace kvserve {

class Rendezvous {
 public:
  // group: the kind of communicator ("gloo", "nccl"), so that two kinds can share a store.
  static absl::StatusOr<std::unique_ptr<Rendezvous>> Join(const CommOptions& options,
                                                          std::string_view group);

  StoreClient& store() { return *client_; }
  // When the rendezvous must be over: the factory call plus options.connect_timeout.
  absl::Time deadline() const { return deadline_; }
  // "<group>/<name>".
  std::string Key(std::string_view name) const;
  // Rank 0: stops the store it started (a given server is the caller's). Call it once every
  // rank has read all it needs from the store, e.g. after the group's first collective.
  void Finish();
  // Rank 0: aborts the store with `status` (REQUIRES: not OK), for the other ranks to fail with,
  // then stops it as Finish does. A no-op on other ranks.
  void Abort(const absl::Status& status);

 private:
  Rendezvous(const CommOptions& options, std::string_view group, absl::Time deadline)
      : rank_(options.rank),
        size_(options.size),
        group_(group),
        connect_timeout_(options.connect_timeout),
        deadline_(deadline) {}

  // Waits until every rank has announced itself; names the missing ranks when some did not.
  absl::Status WaitForAllRanks();

  const int rank_;
  const int size_;
  const std::string group_;
  const absl::Duration connect_timeout_;
  const absl::Time deadline_;
  std::unique_ptr<StoreServer> owned_server_;  // rank 0 without a given server
  StoreServer* server_ = nullptr;              // rank 0: owned_server_ or the given one
  std::unique_ptr<StoreClient> client_;
};

}  // namespace kvserve

#endif  // KVSERVE_COMM_RENDEZVOUS_H_
