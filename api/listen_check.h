// CheckCanListen: whether a server could listen on a TCP address now, asked before a process
// spends minutes loading a model, so that a port already in use fails at once with a message
// naming the flag and the address ("--listen 127.0.0.1:50061: address already in use").
//
// It binds and listens a socket as kvserve's servers do (SO_REUSEADDR, never SO_REUSEPORT: the
// gRPC servers turn it off, api/grpc_server.h), then closes it. A port another process
// listens on is refused; one only in TIME_WAIT is not. Port 0 (any free port) passes when the
// host is an address of this machine.
// The servers' own binds still decide; this only moves the common failure earlier.
//
// Thread-safety: thread-safe (no shared state).
#ifndef KVSERVE_API_LISTEN_CHECK_H_
#define KVSERVE_API_LISTEN_CHECK_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvserve {

// `address` is "host:port" ("[::1]:port" for IPv6; a host name resolves to its first address).
// INVALID_ARGUMENT "<flag> <address>: <reason>" when it cannot be listened on (in use, not an
// address of this host, a host that does not resolve, a port out of range).
absl::Status CheckCanListen(absl::string_view flag, absl::string_view address);

// "<flag> <address>: <reason>" for a server that failed to listen on `address`: the reason is
// CheckCanListen's when it finds one, else `fallback`.
absl::Status ListenError(absl::string_view flag, absl::string_view address,
                         absl::string_view fallback);

// CheckCanListen on each port a kvserve server (worker or router) serves: --listen,
// --metrics_listen and, when `http_port` >= 0, --http_port on the host of --listen; and no two
// of them on one port number. The first failure.
absl::Status CheckServingPorts(absl::string_view listen, absl::string_view metrics_listen,
                               int http_port);

}  // namespace kvserve

#endif  // KVSERVE_API_LISTEN_CHECK_H_
