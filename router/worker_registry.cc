#include "router/worker_registry.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"

namespace kvserve {

absl::StatusOr<std::vector<std::string>> ResolveWorkers(const std::string& name_port) {
  const size_t colon = name_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("expected name:port, got ", name_port));
  }
  const std::string host = name_port.substr(0, colon);
  const std::string port = name_port.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  if (int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &results); error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", name_port, ": ", gai_strerror(error)));
  }
  std::vector<std::string> addresses;
  for (addrinfo* entry = results; entry != nullptr; entry = entry->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (entry->ai_family == AF_INET) {
      const auto* ipv4 = reinterpret_cast<const sockaddr_in*>(entry->ai_addr);
      inet_ntop(AF_INET, &ipv4->sin_addr, text, sizeof(text));
      addresses.push_back(absl::StrCat(text, ":", port));
    } else if (entry->ai_family == AF_INET6) {
      const auto* ipv6 = reinterpret_cast<const sockaddr_in6*>(entry->ai_addr);
      inet_ntop(AF_INET6, &ipv6->sin6_addr, text, sizeof(text));
      addresses.push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  freeaddrinfo(results);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  return addresses;
}

WorkerRegistry::WorkerRegistry(ClusterBooks* books,
                               std::shared_ptr<grpc::ChannelCredentials> credentials,
                               WorkerConnectionOptions options)
    : books_(books), credentials_(std::move(credentials)), options_(std::move(options)) {}

WorkerRegistry::~WorkerRegistry() { Stop(); }

void WorkerRegistry::SetAddresses(const std::vector<std::string>& addresses) {
  const absl::flat_hash_set<std::string> wanted(addresses.begin(), addresses.end());
  std::vector<std::shared_ptr<WorkerConnection>> removed;
  std::vector<std::shared_ptr<WorkerConnection>> added;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (wanted.contains(it->first)) {
        ++it;
        continue;
      }
      removed.push_back(std::move(it->second));
      connections_.erase(it++);
    }
    for (const std::string& address : wanted) {
      if (connections_.contains(address)) continue;
      if (absl::Status s = books_->AddWorker(address); !s.ok()) {
        KVSERVE_LOG(kError, "worker_not_added").Field("worker", address).Status(s);
        continue;
      }
      auto connection = std::make_shared<WorkerConnection>(address, credentials_, books_, options_);
      connections_.emplace(address, connection);
      added.push_back(std::move(connection));
    }
  }
  // Outside the lock: Stop joins a thread that may be calling back into the books.
  for (const auto& connection : removed) {
    connection->Stop();
    (void)books_->RemoveWorker(connection->address());
    std::cout << "kvserve-router worker_removed=" << connection->address() << std::endl;
    KVSERVE_LOG(kInfo, "worker_removed").Field("worker", connection->address());
  }
  for (const auto& connection : added) {
    connection->Start();
    std::cout << "kvserve-router worker_added=" << connection->address() << std::endl;
    KVSERVE_LOG(kInfo, "worker_added").Field("worker", connection->address());
  }
  if ((!removed.empty() || !added.empty()) && options_.on_books_changed) {
    options_.on_books_changed();
  }
}

absl::Status WorkerRegistry::StartDns(const std::string& name_port, absl::Duration refresh) {
  KVSERVE_ASSIGN_OR_RETURN(std::vector<std::string> first, ResolveWorkers(name_port));
  SetAddresses(first);
  dns_thread_ = std::thread([this, name_port, refresh] { DnsLoop(name_port, refresh); });
  return absl::OkStatus();
}

void WorkerRegistry::DnsLoop(std::string name_port, absl::Duration refresh) {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), refresh);
      if (stopping_) return;
    }
    absl::StatusOr<std::vector<std::string>> resolved = ResolveWorkers(name_port);
    if (!resolved.ok() || resolved->empty()) {
      KVSERVE_LOG(kWarning, "workers_dns_failed")
          .Field("name", name_port)
          .Field("error", resolved.ok() ? "no address" : resolved.status().ToString())
          .Field("note", "keeping the current workers");
      continue;
    }
    SetAddresses(*resolved);
  }
}

void WorkerRegistry::Stop() {
  std::vector<std::shared_ptr<WorkerConnection>> all;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [address, connection] : connections_) all.push_back(connection);
  }
  if (dns_thread_.joinable()) dns_thread_.join();
  for (const auto& connection : all) connection->Stop();
}

std::shared_ptr<WorkerConnection> WorkerRegistry::Find(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(worker_id);
  return it == connections_.end() ? nullptr : it->second;
}

std::vector<std::string> WorkerRegistry::addresses() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> result;
  for (const auto& [address, connection] : connections_) result.push_back(address);
  std::sort(result.begin(), result.end());
  return result;
}

std::optional<kvserve::v1::ModelInfo> WorkerRegistry::model_info() const {
  absl::MutexLock lock(&mu_);
  for (const auto& [address, connection] : connections_) {
    if (std::optional<kvserve::v1::ModelInfo> info = connection->model_info()) return info;
  }
  return std::nullopt;
}

}  // namespace kvserve
