// StoreServer: the rendezvous store of a communicator group, a small key-value server over TCP
// that the leader (rank 0) runs while the ranks find each other (comm/rendezvous.h). Ranks set
// keys (their addresses, the NCCL id) and get keys, a get waiting on the server until the key
// is set or the client's wait runs out. Values are kept for the server's life; nothing is
// persisted.
//
// One thread accepts, one thread serves each connection (a group has a handful of ranks, and
// the store lives only for the rendezvous). Abort ends the rendezvous for every rank with the
// error of the rank that gave up. The destructor stops the server: it answers the waiting gets
// (aborted: UNAVAILABLE unless Abort said otherwise), gives the clients up to a second to hang
// up, then closes the listener and every connection and joins every thread.
// Thread-safety: thread-safe; port() and address() are constant after Start.
#ifndef KVSERVE_COMM_STORE_SERVER_H_
#define KVSERVE_COMM_STORE_SERVER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "comm/socket_io.h"

namespace kvserve {

class StoreServer {
 public:
  // Listens on `address` ("host:port"; port 0 picks a free port, see port()). Errors:
  // INVALID_ARGUMENT for a malformed address, UNAVAILABLE when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(std::string_view address);
  ~StoreServer();

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // Every waiting get and every later get of a key not set is answered with `status` (REQUIRES:
  // not OK): the ranks still joining fail with the leader's error (say, which rank did not
  // join) instead of a closed connection. The first abort wins.
  void Abort(const absl::Status& status);

  int port() const { return port_; }
  // "host:port" with the bound port: what the other ranks connect to.
  std::string address() const { return net::FormatHostPort({host_, port_}); }

 private:
  StoreServer(net::Socket listener, std::string host, int port)
      : listener_(std::move(listener)), host_(std::move(host)), port_(port) {}

  void AcceptLoop();
  // Serves one connection until the client closes it or the server stops.
  void Serve(int fd);

  net::Socket listener_;
  const std::string host_;
  const int port_;
  std::thread accept_thread_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::string, std::less<>> values_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);       // OK until Abort
  std::set<int> connections_ ABSL_GUARDED_BY(mu_);  // open connection fds
  std::vector<std::thread> serve_threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve

#endif  // KVSERVE_COMM_STORE_SERVER_H_
