#include "router/routing_policy.h"

#include <algorithm>
#include <vector>

#include "kvcache/kv_budget.h"

namespace kvserve {

std::string_view RouteVerdictName(RouteVerdict verdict) {
  switch (verdict) {
    case RouteVerdict::kRouted:
      return "routed";
    case RouteVerdict::kNoFitNow:
      return "no_fit_now";
    case RouteVerdict::kNeverFits:
      return "never_fits";
    case RouteVerdict::kNoWorker:
      return "no_worker";
  }
  return "unknown";
}

namespace {

int64_t NeededBlocks(const RoutingQuery& query) {
  return KvBudgetFor(query.prompt_tokens, query.max_tokens, query.num_choices, query.context_length,
                     query.block_size)
      .blocks;
}

int64_t AvailableBlocks(const WorkerLoad& load) {
  return std::max<int64_t>(0, load.free_blocks - load.reserved_blocks);
}

// Blocks after `cached` + `host` that `load`'s worker would fetch from the query's transfer
// source: only a worker with a host tier (where fetched blocks land, so no more than it holds)
// and the source's block format, and only a run of at least min_transfer_blocks.
int64_t RemoteBlocks(const RoutingQuery& query, const WorkerLoad& load,
                     const RoutingWeights& weights, int64_t max_cached, int64_t cached,
                     int64_t host) {
  const bool can_receive = !query.source_kv_transfer_format.empty() &&
                           load.kv_transfer_format == query.source_kv_transfer_format &&
                           load.host_blocks > 0;
  if (!can_receive) return 0;
  // Fetched blocks land in the receiver's host tier, which takes no more than it holds.
  const int64_t remote = std::min(
      load.host_blocks,
      std::max<int64_t>(0, std::min(query.source_matched_blocks, max_cached) - cached - host));
  return remote >= weights.min_transfer_blocks ? remote : 0;
}

int32_t QueuedAndRunning(const WorkerLoad& load) {
  return load.running_requests + load.waiting_requests + load.outstanding_requests;
}

// True when `a` beats `b` (both fit) under `policy` (not kRandom, which draws instead).
bool Better(RoutingPolicy policy, const RoutingQuery& query, const WorkerCost& a,
            const WorkerLoad& a_load, const WorkerCost& b, const WorkerLoad& b_load) {
  if (policy == RoutingPolicy::kRoundRobin) return a_load.last_chosen < b_load.last_chosen;
  if (policy == RoutingPolicy::kLeastLoaded) {
    if (QueuedAndRunning(a_load) != QueuedAndRunning(b_load)) {
      return QueuedAndRunning(a_load) < QueuedAndRunning(b_load);
    }
    if (AvailableBlocks(a_load) != AvailableBlocks(b_load)) {
      return AvailableBlocks(a_load) > AvailableBlocks(b_load);
    }
    return a_load.last_chosen < b_load.last_chosen;
  }
  // A migration: the fewest blocks to compute, whether the worker holds them (either tier) or
  // fetches them.
  const int64_t a_reused = a.cached_blocks + a.host_cached_blocks + a.remote_blocks;
  const int64_t b_reused = b.cached_blocks + b.host_cached_blocks + b.remote_blocks;
  if (query.prefer_longest_prefix && a_reused != b_reused) return a_reused > b_reused;
  if (a.cost != b.cost) return a.cost < b.cost;
  if (a_load.outstanding_requests != b_load.outstanding_requests) {
    return a_load.outstanding_requests < b_load.outstanding_requests;
  }
  return a_load.last_chosen < b_load.last_chosen;
}

}  // namespace

WorkerCost CostOf(const RoutingQuery& query, const WorkerLoad& load,
                  const RoutingWeights& weights) {
  WorkerCost result;
  const int64_t needed = NeededBlocks(query);
  const int64_t max_cached = std::max<int64_t>(0, (query.prompt_tokens - 1) / query.block_size);
  result.cached_blocks = std::clamp<int64_t>(load.matched_blocks, 0, max_cached);
  result.host_cached_blocks =
      std::clamp<int64_t>(load.host_matched_blocks, 0, max_cached - result.cached_blocks);
  result.remote_blocks = RemoteBlocks(query, load, weights, max_cached, result.cached_blocks,
                                      result.host_cached_blocks);
  // Host-tier and remote blocks are copied into new pool blocks: they stay in needed - cached.
  result.charged_blocks =
      needed - result.cached_blocks + std::min(result.cached_blocks, load.evictable_blocks);
  const int64_t available = AvailableBlocks(load);
  // A worker whose waiting queue would be full (its report plus what this router sent since)
  // would refuse the request: it waits here instead, like a request that does not fit.
  const bool queue_has_room =
      load.max_waiting_requests <= 0 ||
      load.waiting_requests + load.outstanding_requests < load.max_waiting_requests;
  result.fits = result.charged_blocks <= available && load.total_blocks > 0 && queue_has_room;

  const double host_tokens = static_cast<double>(result.host_cached_blocks * query.block_size);
  const double remote_tokens = static_cast<double>(result.remote_blocks * query.block_size);
  const double uncached_tokens =
      static_cast<double>(query.prompt_tokens - result.cached_blocks * query.block_size) -
      host_tokens - remote_tokens + weights.host_hit_token_cost * host_tokens +
      weights.transfer_token_cost * remote_tokens;
  const double used_after =
      load.total_blocks > 0
          ? static_cast<double>(load.total_blocks - available + result.charged_blocks) /
                static_cast<double>(load.total_blocks)
          : 1.0;
  result.cost = weights.prefill_token_cost * uncached_tokens +
                weights.pool_usage_cost * used_after +
                weights.waiting_request_cost *
                    static_cast<double>(load.waiting_requests + load.outstanding_requests) +
                weights.running_request_cost * static_cast<double>(load.running_requests);
  return result;
}

RoutingChoice ChooseWorker(const RoutingQuery& query, absl::Span<const WorkerLoad> candidates,
                           const RoutingWeights& weights, RoutingPolicy policy) {
  RoutingChoice choice;
  choice.needed_blocks = NeededBlocks(query);
  if (choice.needed_blocks > query.largest_pool_blocks) {
    choice.verdict = RouteVerdict::kNeverFits;
    return choice;
  }
  if (candidates.empty()) {
    choice.verdict = RouteVerdict::kNoWorker;
    return choice;
  }
  // One pass, no allocation: a decision is made per request on the router's hot path.
  WorkerCost best;
  int64_t num_fitting = 0;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const WorkerCost cost = CostOf(query, candidates[i], weights);
    choice.best_cached_blocks =
        std::max(choice.best_cached_blocks, cost.cached_blocks + cost.host_cached_blocks);
    if (!cost.fits) continue;
    ++num_fitting;
    if (policy == RoutingPolicy::kRandom) continue;
    if (choice.index < 0 ||
        Better(policy, query, cost, candidates[i], best, candidates[choice.index])) {
      choice.index = i;
      best = cost;
    }
  }
  if (policy == RoutingPolicy::kRandom && num_fitting > 0) {
    // The draw's fitting worker, found by a second pass.
    uint64_t skip = query.random_draw % static_cast<uint64_t>(num_fitting);
    for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
      const WorkerCost cost = CostOf(query, candidates[i], weights);
      if (cost.fits && skip-- == 0) {
        choice.index = i;
        best = cost;
        break;
      }
    }
  }
  if (choice.index >= 0) choice.chosen = best;
  choice.verdict = choice.index >= 0 ? RouteVerdict::kRouted : RouteVerdict::kNoFitNow;
  return choice;
}

}  // namespace kvserve
