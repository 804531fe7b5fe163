// WorkerRegistry: the set of workers the router talks to, kept equal to what discovery says.
//
// Discovery is either a static list (SetAddresses once) or a DNS name ("name:port", e.g. a
// Kubernetes headless Service whose A/AAAA records are the worker pods), re-resolved every
// `refresh` by a background thread with getaddrinfo. Each address becomes a worker id in the
// books and a WorkerConnection (channel + status stream). Addresses that disappear from
// discovery are stopped and removed from the books; a failed or empty resolution keeps the
// current set (a DNS outage must not empty the cluster).
//
// Thread-safety: thread-safe. Stop() joins the DNS thread and every connection; the books must
// outlive the registry.
#ifndef KVSERVE_ROUTER_WORKER_REGISTRY_H_
#define KVSERVE_ROUTER_WORKER_REGISTRY_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/cluster_books.h"
#include "router/worker_connection.h"

namespace kvserve {

// Every address `name` resolves to, as "ip:port" / "[ipv6]:port", sorted, without duplicates.
// UNAVAILABLE when resolution fails.
absl::StatusOr<std::vector<std::string>> ResolveWorkers(const std::string& name_port);

class WorkerRegistry {
 public:
  WorkerRegistry(ClusterBooks* books, std::shared_ptr<grpc::ChannelCredentials> credentials,
                 WorkerConnectionOptions options);
  ~WorkerRegistry();
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // Makes the worker set exactly `addresses`: connects new ones, drops missing ones.
  void SetAddresses(const std::vector<std::string>& addresses);
  // Resolves `name_port` now (an error if that fails: start-up names the flag) and then every
  // `refresh` on a background thread.
  absl::Status StartDns(const std::string& name_port, absl::Duration refresh);
  // Stops the DNS thread and every connection. Idempotent.
  void Stop();

  // The connection of a worker id; null when it is no longer registered.
  std::shared_ptr<WorkerConnection> Find(const std::string& worker_id) const;
  std::vector<std::string> addresses() const;
  // The ModelInfo of any worker that reported one.
  std::optional<kvserve::v1::ModelInfo> model_info() const;

 private:
  void DnsLoop(std::string name_port, absl::Duration refresh);

  ClusterBooks* const books_;  // not owned
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  const WorkerConnectionOptions options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<WorkerConnection>> connections_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread dns_thread_;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_WORKER_REGISTRY_H_
