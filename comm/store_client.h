// StoreClient: one rank's connection to the group's rendezvous store (comm/store_server.h).
//
// Every call takes a deadline. Errors: DEADLINE_EXCEEDED when it passes (for Get: the key was
// not set in time, named in the message), UNAVAILABLE when the server is gone; a get answered
// by an aborted store returns the abort's status (its code, the leader's message).
// Thread-safety: one call at a time (calls share the connection).
#ifndef KVSERVE_COMM_STORE_CLIENT_H_
#define KVSERVE_COMM_STORE_CLIENT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/socket_io.h"

namespace kvserve {

class StoreClient {
 public:
  // Connects to the server at `address` ("host:port"), retrying until `deadline` while it is
  // not listening yet.
  static absl::StatusOr<std::unique_ptr<StoreClient>> Connect(std::string_view address,
                                                              absl::Time deadline);

  absl::Status Set(std::string_view key, std::string_view value, absl::Time deadline);
  // The value of `key`, waiting until some rank sets it or `deadline` passes.
  absl::StatusOr<std::string> Get(std::string_view key, absl::Time deadline);
  // Whether `key` is set now (no wait on the server).
  absl::StatusOr<bool> Contains(std::string_view key);

  const std::string& address() const { return address_; }

 private:
  StoreClient(net::Socket socket, std::string address)
      : socket_(std::move(socket)), address_(std::move(address)) {}

  // One get that waits on the server until `wait_until`; the reply may come a little later.
  absl::StatusOr<std::pair<bool, std::string>> Fetch(std::string_view key, absl::Time wait_until);

  net::Socket socket_;
  const std::string address_;
};

}  // namespace kvserve

#endif  // KVSERVE_COMM_STORE_CLIENT_H_
