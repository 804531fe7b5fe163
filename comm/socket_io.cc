#include "comm/socket_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace kvserve::net {
namespace {

std::string ErrnoText(int error) { return std::strerror(error); }

// Milliseconds until `deadline` for poll(2): -1 for an infinite deadline, at least 0.
int PollTimeoutMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(
      absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))), 1 << 30));
}

// Waits until fd is ready for `events`: OK, DEADLINE_EXCEEDED, or UNAVAILABLE on a poll error.
absl::Status WaitReady(int fd, short events, absl::Time deadline, const char* what) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = poll(&entry, 1, PollTimeoutMs(deadline));
    if (ready > 0) return absl::OkStatus();
    if (ready == 0) return absl::DeadlineExceededError(absl::StrCat(what, " timed out"));
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat(what, ": ", ErrnoText(errno)));
  }
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoList> Resolve(const HostPort& address, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string port = std::to_string(address.port);
  const int error = getaddrinfo(address.host.empty() ? nullptr : address.host.c_str(), port.c_str(),
                                &hints, &result);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", FormatHostPort(address), ": ", gai_strerror(error)));
  }
  return AddrInfoList(result);
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// One non-blocking connect attempt to `info`, waiting at most until `deadline`.
absl::StatusOr<Socket> ConnectOnce(const addrinfo& info, absl::Time deadline) {
  Socket socket(::socket(info.ai_family, info.ai_socktype | SOCK_CLOEXEC, info.ai_protocol));
  if (!socket.valid()) return absl::UnavailableError(absl::StrCat("socket: ", ErrnoText(errno)));
  const int flags = fcntl(socket.fd(), F_GETFL);
  fcntl(socket.fd(), F_SETFL, flags | O_NONBLOCK);
  if (connect(socket.fd(), info.ai_addr, info.ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return absl::UnavailableError(ErrnoText(errno));
    absl::Status ready = WaitReady(socket.fd(), POLLOUT, deadline, "connect");
    if (!ready.ok()) return ready;
    int error = 0;
    socklen_t length = sizeof(error);
    getsockopt(socket.fd(), SOL_SOCKET, SO_ERROR, &error, &length);
    if (error != 0) return absl::UnavailableError(ErrnoText(error));
  }
  fcntl(socket.fd(), F_SETFL, flags);
  SetNoDelay(socket.fd());
  return socket;
}

}  // namespace

absl::StatusOr<HostPort> ParseHostPort(std::string_view address) {
  HostPort result;
  std::string_view port;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", std::string(address), "\" is not [ipv6]:port"));
    }
    result.host = std::string(address.substr(1, close - 1));
    port = address.substr(close + 2);
  } else {
    const size_t colon = address.rfind(':');
    if (colon == std::string_view::npos || address.find(':') != colon) {
      return absl::InvalidArgumentError(
          absl::StrCat("address \"", std::string(address), "\" is not host:port"));
    }
    result.host = std::string(address.substr(0, colon));
    port = address.substr(colon + 1);
  }
  if (!absl::SimpleAtoi(std::string(port), &result.port) || result.port < 0 ||
      result.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", std::string(address), "\" has no port in 0..65535"));
  }
  return result;
}

std::string FormatHostPort(const HostPort& address) {
  if (address.host.find(':') != std::string::npos) {
    return absl::StrCat("[", address.host, "]:", address.port);
  }
  return absl::StrCat(address.host, ":", address.port);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.Release();
  }
  return *this;
}

int Socket::Release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::Close() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

void Socket::Shutdown() const {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

absl::StatusOr<Socket> Listen(const HostPort& address, int* bound_port) {
  KVSERVE_ASSIGN_OR_RETURN(AddrInfoList infos, Resolve(address, /*passive=*/true));
  std::string last_error = "no address";
  for (const addrinfo* info = infos.get(); info != nullptr; info = info->ai_next) {
    Socket socket(::socket(info->ai_family, info->ai_socktype | SOCK_CLOEXEC, info->ai_protocol));
    if (!socket.valid()) continue;
    const int one = 1;
    setsockopt(socket.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(socket.fd(), info->ai_addr, info->ai_addrlen) != 0 || listen(socket.fd(), 128) != 0) {
      last_error = ErrnoText(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&bound), &length);
    *bound_port = bound.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                      : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
    return socket;
  }
  return absl::UnavailableError(
      absl::StrCat("cannot listen on ", FormatHostPort(address), ": ", last_error));
}

absl::StatusOr<Socket> ConnectWithRetry(const HostPort& address, absl::Time deadline) {
  absl::Duration backoff = absl::Milliseconds(20);
  std::string last_error;
  while (true) {
    absl::StatusOr<AddrInfoList> infos = Resolve(address, /*passive=*/false);
    if (!infos.ok()) {
      last_error = std::string(infos.status().message());
    } else {
      for (const addrinfo* info = infos->get(); info != nullptr; info = info->ai_next) {
        // One attempt waits at most a second, so a dropped SYN is retried.
        absl::StatusOr<Socket> socket =
            ConnectOnce(*info, std::min(deadline, absl::Now() + absl::Seconds(1)));
        if (socket.ok()) return socket;
        last_error = std::string(socket.status().message());
      }
    }
    if (absl::Now() + backoff >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("cannot connect to ", FormatHostPort(address), " (", last_error, ")"));
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::Status SendAll(int fd, const void* data, size_t bytes, absl::Time deadline) {
  const char* next = static_cast<const char*>(data);
  while (bytes > 0) {
    absl::Status ready = WaitReady(fd, POLLOUT, deadline, "send");
    if (!ready.ok()) return ready;
    const ssize_t sent = send(fd, next, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return absl::UnavailableError(absl::StrCat("send: ", ErrnoText(errno)));
    }
    next += sent;
    bytes -= static_cast<size_t>(sent);
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t bytes, absl::Time deadline) {
  char* next = static_cast<char*>(data);
  while (bytes > 0) {
    absl::Status ready = WaitReady(fd, POLLIN, deadline, "receive");
    if (!ready.ok()) return ready;
    const ssize_t received = recv(fd, next, bytes, MSG_DONTWAIT);
    if (received == 0) return absl::UnavailableError("the connection was closed by the peer");
    if (received < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return absl::UnavailableError(absl::StrCat("receive: ", ErrnoText(errno)));
    }
    next += received;
    bytes -= static_cast<size_t>(received);
  }
  return absl::OkStatus();
}

}  // namespace kvserve::net
