// RouterAdminService: kvserve.v1.RouterAdmin (router_admin.proto) as the router serves it: the
// workers in its books (ClusterBooks::Workers) with their health and capacity, so that tools
// (`kvserve-cli workers --target=ROUTER`) need no worker addresses. Authenticated like the
// Generation service (AuthenticateCall: UNAUTHENTICATED without a valid bearer token when auth is
// on). Callback API: no thread is held per call.
//
// Thread-safety: thread-safe (ClusterBooks is).
#ifndef KVSERVE_ROUTER_ROUTER_ADMIN_SERVICE_H_
#define KVSERVE_ROUTER_ROUTER_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <vector>

#include "kvserve/v1/router_admin.grpc.pb.h"
#include "router/cluster_books.h"
#include "router/router_metrics.h"
#include "router/token_auth.h"

namespace kvserve {

// The RouterAdmin form of the books' summaries, ordered by address.
kvserve::v1::ListWorkersResponse ToListWorkersResponse(std::vector<WorkerSummary> workers);

class RouterAdminService final : public kvserve::v1::RouterAdmin::WithCallbackMethod_ListWorkers<
                                     kvserve::v1::RouterAdmin::Service> {
 public:
  // Everything is borrowed and must outlive the service.
  RouterAdminService(const TokenAuth* auth, const ClusterBooks* books, RouterMetrics* metrics)
      : auth_(auth), books_(books), metrics_(metrics) {}

  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* call,
                                        const kvserve::v1::ListWorkersRequest* request,
                                        kvserve::v1::ListWorkersResponse* response) override;

 private:
  const TokenAuth* const auth_;
  const ClusterBooks* const books_;
  RouterMetrics* const metrics_;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_ADMIN_SERVICE_H_
