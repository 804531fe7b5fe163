#include "comm/comm_options.h"

#include "absl/strings/str_cat.h"
#include "comm/socket_io.h"

namespace kvserve {

absl::Status ValidateCommOptions(const CommOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("group size ", options.size, " is not >= 1"));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not in 0..", options.size - 1));
  }
  if (options.timeout <= absl::ZeroDuration() || options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout and connect_timeout must be positive");
  }
  if (options.server != nullptr && options.rank != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " was given a store server; only rank 0 runs it"));
  }
  if (!options.hostname.empty() && !options.interface.empty()) {
    return absl::InvalidArgumentError("set hostname or interface, not both");
  }
  if (options.server == nullptr) {
    absl::StatusOr<net::HostPort> leader = net::ParseHostPort(options.leader_address);
    if (!leader.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("leader_address: ", leader.status().message()));
    }
    if (leader->port == 0 && options.size > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("leader_address \"", options.leader_address,
                       "\" has port 0, which the followers cannot find: give a port, or start "
                       "a StoreServer on port 0 and pass it as `server` to rank 0"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve
