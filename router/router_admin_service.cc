#include "router/router_admin_service.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/unary_call.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

v1::WorkerHealth ToProto(WorkerHealth health) {
  switch (health) {
    case WorkerHealth::kHealthy:
      return v1::WORKER_HEALTH_HEALTHY;
    case WorkerHealth::kDraining:
      return v1::WORKER_HEALTH_DRAINING;
    case WorkerHealth::kFailed:
      return v1::WORKER_HEALTH_FAILED;
    case WorkerHealth::kUnreachable:
      return v1::WORKER_HEALTH_UNREACHABLE;
    case WorkerHealth::kRefused:
      return v1::WORKER_HEALTH_REFUSED;
  }
  return v1::WORKER_HEALTH_UNSPECIFIED;
}

}  // namespace

v1::ListWorkersResponse ToListWorkersResponse(std::vector<WorkerSummary> workers) {
  std::sort(workers.begin(), workers.end(), [](const WorkerSummary& a, const WorkerSummary& b) {
    return a.worker_id < b.worker_id;
  });
  v1::ListWorkersResponse response;
  const absl::Time now = absl::Now();
  for (const WorkerSummary& worker : workers) {
    v1::WorkerInfo* info = response.add_workers();
    info->set_address(worker.worker_id);
    info->set_id(worker.reported_id);
    info->set_health(ToProto(worker.health));
    info->set_failed(worker.health == WorkerHealth::kFailed);
    info->set_capacity_known(worker.capacity_known);
    info->set_block_size(worker.capacity.block_size);
    info->set_total_blocks(worker.capacity.total_blocks);
    info->set_free_blocks(worker.capacity.free_blocks);
    info->set_cached_blocks(worker.cached_blocks);
    info->set_evictable_blocks(worker.capacity.evictable_blocks);
    info->set_host_blocks(worker.capacity.host_blocks);
    info->set_host_cached_blocks(worker.host_cached_blocks);
    info->set_kv_transfer_format(worker.kv_transfer_format);
    info->set_running_requests(worker.capacity.running_requests);
    info->set_waiting_requests(worker.capacity.waiting_requests);
    info->set_reserved_blocks(worker.reserved_blocks);
    info->set_outstanding_requests(worker.outstanding_requests);
    info->set_refused_reason(worker.refused_reason);
    info->set_index_state(std::string(IndexStateName(worker)));
    info->set_index_lag_ms(worker.last_report == absl::InfinitePast()
                               ? -1
                               : absl::ToInt64Milliseconds(now - worker.last_report));
  }
  return response;
}

grpc::ServerUnaryReactor* RouterAdminService::ListWorkers(grpc::CallbackServerContext* call,
                                                          const v1::ListWorkersRequest* /*request*/,
                                                          v1::ListWorkersResponse* response) {
  absl::StatusOr<std::string> tenant = AuthenticateCall(*auth_, *call);
  if (!tenant.ok()) {
    metrics_->RecordRejection("unauthenticated");
    return FinishUnary<v1::ListWorkersResponse>(call, tenant.status(), response);
  }
  return FinishUnary(
      call, absl::StatusOr<v1::ListWorkersResponse>(ToListWorkersResponse(books_->Workers())),
      response);
}

}  // namespace kvserve
