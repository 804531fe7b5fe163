// Blocking TCP helpers with deadlines for the rendezvous store (comm/store_server.h,
// comm/store_client.h): "host:port" parsing, listen, connect with retries, and whole-buffer
// send / receive that give up at a deadline.
//
// Errors: INVALID_ARGUMENT for a malformed address, UNAVAILABLE when the peer is gone (refused,
// reset, closed), DEADLINE_EXCEEDED when the deadline passes first. Sends never raise SIGPIPE.
// Thread-safety: free functions; a Socket is owned by one thread at a time (Shutdown may be
// called from another thread to wake a blocked reader).
#ifndef KVSERVE_COMM_SOCKET_IO_H_
#define KVSERVE_COMM_SOCKET_IO_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve::net {

struct HostPort {
  std::string host;  // a name, an IPv4 address or an IPv6 address without brackets
  int port = 0;      // 0..65535 (0: any free port, when listening)
};

// "host:port" or "[v6 address]:port".
absl::StatusOr<HostPort> ParseHostPort(std::string_view address);
// The reverse, bracketing IPv6 addresses.
std::string FormatHostPort(const HostPort& address);

// An owned file descriptor; closed on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { Close(); }
  Socket(Socket&& other) noexcept : fd_(other.Release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Close();
  // Wakes any thread blocked on the socket (shutdown(2) both ways); the fd stays open.
  void Shutdown() const;

 private:
  int fd_ = -1;
};

// A listening socket on `address` (port 0: a free port); *bound_port gets the port.
absl::StatusOr<Socket> Listen(const HostPort& address, int* bound_port);
// Connects to `address`, retrying refused or unreachable attempts until `deadline` (the
// listener may not be up yet). DEADLINE_EXCEEDED names the last error.
absl::StatusOr<Socket> ConnectWithRetry(const HostPort& address, absl::Time deadline);

absl::Status SendAll(int fd, const void* data, size_t bytes, absl::Time deadline);
// UNAVAILABLE when the peer closes the connection before `bytes` arrived.
absl::Status RecvAll(int fd, void* data, size_t bytes, absl::Time deadline);

}  // namespace kvserve::net

#endif  // KVSERVE_COMM_SOCKET_IO_H_
