#include "api/listen_check.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

absl::Status Refused(absl::string_view flag, absl::string_view address, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, " ", address, ": ", why));
}

// strerror's text with a lower-case first letter, as our other messages ("address already in
// use").
std::string ErrnoText(int error) {
  std::string text = std::strerror(error);
  if (!text.empty()) text[0] = absl::ascii_tolower(static_cast<unsigned char>(text[0]));
  return text;
}

// The port part of "host:port".
absl::string_view PortOf(absl::string_view address) {
  return address.substr(address.rfind(':') + 1);
}

}  // namespace

absl::Status CheckCanListen(absl::string_view flag, absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return Refused(flag, address, "expected host:port");
  const std::string host(absl::StripSuffix(absl::StripPrefix(address.substr(0, colon), "["), "]"));
  const std::string port(address.substr(colon + 1));
  int port_number = 0;
  if (!absl::SimpleAtoi(port, &port_number) || port_number < 0 || port_number > 65535) {
    return Refused(flag, address, "the port must be a number in [0, 65535]");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int resolved =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (resolved != 0 || found == nullptr) {
    return Refused(flag, address, absl::StrCat("cannot resolve: ", gai_strerror(resolved)));
  }
  int error = 0;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) {
    error = errno;
  } else {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 1) != 0) error = errno;
    close(fd);
  }
  freeaddrinfo(found);
  if (error != 0) return Refused(flag, address, ErrnoText(error));
  return absl::OkStatus();
}

absl::Status ListenError(absl::string_view flag, absl::string_view address,
                         absl::string_view fallback) {
  absl::Status check = CheckCanListen(flag, address);
  if (!check.ok()) return check;
  return Refused(flag, address, fallback);
}

absl::Status CheckServingPorts(absl::string_view listen, absl::string_view metrics_listen,
                               int http_port) {
  struct Port {
    absl::string_view flag;
    std::string address;
  };
  std::vector<Port> ports = {{"--listen", std::string(listen)},
                             {"--metrics_listen", std::string(metrics_listen)}};
  if (http_port >= 0) {
    ports.push_back(
        {"--http_port", absl::StrCat(listen.substr(0, listen.rfind(':')), ":", http_port)});
  }
  for (size_t i = 0; i < ports.size(); ++i) {
    KVSERVE_RETURN_IF_ERROR(CheckCanListen(ports[i].flag, ports[i].address));
    // Two of this process's own ports on one number: the second bind would fail once the
    // model is loaded (port 0 is a fresh free port each time).
    const absl::string_view number = PortOf(ports[i].address);
    for (size_t j = 0; j < i; ++j) {
      if (number != "0" && PortOf(ports[j].address) == number) {
        return Refused(ports[i].flag, ports[i].address,
                       absl::StrCat("the port of ", ports[j].flag, " too"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve
