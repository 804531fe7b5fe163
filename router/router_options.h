// Options of the router's core: the routing cost weights and the admission queue's limits.
//
// Plain structs, validated once at start-up (Validate names the offending field, as the flag the
// service maps it to). The cost formula the weights feed is written out, with a worked example,
// in docs/routing.md; routing_policy.h implements it.
//
// Thread-safety: plain values.

#ifndef KVSERVE_ROUTER_ROUTER_OPTIONS_H_
#define KVSERVE_ROUTER_ROUTER_OPTIONS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve {

// Weights of the routing cost. The cost of sending a request to a worker is measured in
// "prompt tokens of prefill work": uncached prompt tokens count 1 each (times
// prefill_token_cost), and the load terms say how many prefill tokens one unit of load is worth.
// The worker with the lowest cost wins; see docs/routing.md.
struct RoutingWeights {
  // Per prompt token that the worker does not hold in its prefix cache (must be computed).
  double prefill_token_cost = 1.0;
  // Per prompt token the worker holds in its host KV tier only: a copy back to the pool instead
  // of a prefill, as a fraction of prefill_token_cost: the copy-back time over the prefill
  // time of the same blocks. Measured 0.0055 on the CPU backend (bench/RESULTS.md, "Host KV
  // tier", model_bench BM_NextToken_Tiered); a PCIe copy beside an H200's prefill is estimated
  // near 0.1 (not measured yet). 0.05 sits between.
  double host_hit_token_cost = 0.05;
  // Per unit of the worker's KV pool in use after admitting the request (0..1 fraction): a
  // worker at 100% costs this many prefill tokens more than an empty one.
  double pool_usage_cost = 2048.0;
  // Per request queued at the worker (waiting in its scheduler, or routed by this router and not
  // yet covered by a status report).
  double waiting_request_cost = 512.0;
  // Per request the worker is generating now.
  double running_request_cost = 64.0;
  // Per prompt token the worker would fetch from another worker (KV block transfer) instead of
  // computing: the fraction of a prefill token's cost one transferred token costs. Measured 0.02
  // on a 2-core CPU over loopback (bench/RESULTS.md "KV block transfer"); set above that because
  // a network is slower than loopback. A GPU cluster over TCP should set it near 1 (its prefill
  // is far faster; docs/routing.md).
  double transfer_token_cost = 0.1;
  // A transfer is planned only for at least this many blocks: below that, the fetch's fixed
  // cost (a call to the holder, its round trips) outweighs what it saves.
  int64_t min_transfer_blocks = 2;

  absl::Status Validate() const;
};

// Which worker a request goes to among those where it fits (routing_policy.h). Everything else
// (admission, the fit rule, reservations, queueing, migration) is the same under every policy,
// so an A/B between them changes one thing: the choice.
enum class RoutingPolicy {
  kKvAware,      // the lowest routing cost: cached prefix, pool usage, queues (the default)
  kRoundRobin,   // the fitting worker chosen least recently
  kLeastLoaded,  // the fitting worker with the fewest running + waiting + outstanding requests
  kRandom,       // a fitting worker drawn uniformly
};
// "kv_aware", "round_robin", "least_loaded", "random": the flag's values.
std::string_view RoutingPolicyName(RoutingPolicy policy);
// INVALID_ARGUMENT listing the accepted names when `name` is none of them.
absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(std::string_view name);

struct AdmissionOptions {
  // Requests that may wait for capacity at once; one more is refused with RESOURCE_EXHAUSTED.
  int max_waiting_requests = 1024;

  absl::Status Validate() const;
};

struct RouterCoreOptions {
  // Tokens per KV block; every worker must report this block size (GetModelInfo / Capacity).
  int block_size = 16;
  // A reservation (blocks the router charged a worker for a request it routed there) is kept
  // until this many status reports with capacity have arrived from that worker after the request
  // was marked started (ClusterBooks::MarkStarted), or until the request ends. 2 rather than 1
  // because a report the worker built just before it admitted the request can arrive after the
  // request's first output.
  int reports_to_cover_reservation = 2;
  RoutingPolicy policy = RoutingPolicy::kKvAware;
  RoutingWeights weights = {};
  // KV block transfer between workers (routing_policy.h): when false, no transfer is costed or
  // planned, and routing is what it was without it (an A/B switch).
  bool kv_transfer = true;
  AdmissionOptions admission = {};

  absl::Status Validate() const;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTER_OPTIONS_H_
