// CommOptions: how one rank joins a communicator group (Gloo or NCCL): its rank, the group's
// size, where the leader's rendezvous store listens, and the timeouts. A plain struct, checked
// once by ValidateCommOptions (the factories call it).
#ifndef KVSERVE_COMM_COMM_OPTIONS_H_
#define KVSERVE_COMM_COMM_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvserve {

class StoreServer;

struct CommOptions {
  int rank = 0;  // 0 .. size - 1; rank 0 is the leader
  int size = 1;
  // "host:port" of the leader's rendezvous store: every rank connects there. Rank 0 listens
  // there itself unless `server` is given (port 0 is then refused for a group of more than one
  // rank, since no follower could find it).
  std::string leader_address;
  // Rank 0 only, optional: a store already running (e.g. started on port 0 before spawning
  // the followers, which are then given server->address()). Not owned; it must outlive the
  // factory call. It serves one group per communicator kind; a rendezvous that fails aborts it
  // (comm/store_server.h), so make a new one to try again.
  StoreServer* server = nullptr;
  // Every collective fails with DEADLINE_EXCEEDED when it has not completed within this.
  absl::Duration timeout = absl::Seconds(30);
  // Every rank must have joined within this (from the factory call), or the factory returns
  // DEADLINE_EXCEEDED naming the ranks that did not.
  absl::Duration connect_timeout = absl::Seconds(60);
  // Gloo only: the local address the rank's connections to its peers use and advertise (a
  // name or an IP address; empty: this host's name as the resolver knows it), or the network
  // interface to take the address from ("eth0"; set one of the two at most).
  std::string hostname;
  std::string interface;
};

// INVALID_ARGUMENT naming the field when the options cannot describe a rank of a group.
absl::Status ValidateCommOptions(const CommOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_COMM_COMM_OPTIONS_H_
