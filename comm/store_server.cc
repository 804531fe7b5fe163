#include "comm/store_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/store_protocol.h"

namespace kvserve {
namespace {

// A get waits at most a day on the server, whatever it asks for.
constexpr uint64_t kMaxWaitMs = 24 * 3600 * 1000;
// How long a stopping server waits for its clients to hang up.
constexpr absl::Duration kHangUpGrace = absl::Seconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<StoreServer>> StoreServer::Start(std::string_view address) {
  KVSERVE_ASSIGN_OR_RETURN(net::HostPort host_port, net::ParseHostPort(address));
  int port = 0;
  KVSERVE_ASSIGN_OR_RETURN(net::Socket listener, net::Listen(host_port, &port));
  std::unique_ptr<StoreServer> server(new StoreServer(std::move(listener), host_port.host, port));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

StoreServer::~StoreServer() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (aborted_.ok()) {
      aborted_ = absl::UnavailableError(absl::StrCat("the store at ", address(), " stopped"));
    }
    // The waiting gets answer now; let their clients read it and hang up before closing.
    const auto all_closed = [this]()
                                ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return connections_.empty(); };
    mu_.AwaitWithTimeout(absl::Condition(&all_closed), kHangUpGrace);
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);
  }
  listener_.Shutdown();  // wakes accept(2)
  accept_thread_.join();
  // No thread is added once the accept loop has ended.
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(serve_threads_);
  }
  for (std::thread& thread : threads) thread.join();
}

void StoreServer::Abort(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = status;
}

void StoreServer::AcceptLoop() {
  while (true) {
    const int fd = accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        if (fd >= 0) close(fd);
        return;
      }
      if (fd >= 0) {
        connections_.insert(fd);
        serve_threads_.emplace_back([this, fd] { Serve(fd); });
        continue;
      }
    }
    // EINTR, ECONNABORTED, or out of descriptors for now: try again shortly.
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void StoreServer::Serve(int fd) {
  while (true) {
    absl::StatusOr<store_protocol::Request> request =
        store_protocol::RecvRequest(fd, absl::InfiniteFuture());
    if (!request.ok()) break;  // closed by the client, a bad frame, or the server stops
    store_protocol::Reply reply;
    {
      absl::MutexLock lock(&mu_);
      if (request->op == store_protocol::Op::kSet) {
        values_[request->key] = std::move(request->value);
        reply.result = store_protocol::Result::kFound;
      } else {
        const std::string& key = request->key;
        const auto set_or_aborted = [this, &key]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !aborted_.ok() || values_.count(key) > 0;
        };
        mu_.AwaitWithTimeout(absl::Condition(&set_or_aborted),
                             absl::Milliseconds(std::min<uint64_t>(request->wait_ms, kMaxWaitMs)));
        if (auto it = values_.find(key); it != values_.end()) {
          reply.result = store_protocol::Result::kFound;
          reply.value = it->second;
        } else if (!aborted_.ok()) {
          reply.result = store_protocol::Result::kAborted;
          reply.value = store_protocol::EncodeStatus(aborted_);
        }
      }
    }
    // A client that stops reading cannot hold the thread for long.
    if (!store_protocol::SendReply(fd, reply, absl::Now() + absl::Seconds(10)).ok()) break;
  }
  absl::MutexLock lock(&mu_);
  connections_.erase(fd);
  close(fd);
}

}  // namespace kvserve
