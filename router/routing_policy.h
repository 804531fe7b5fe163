// The routing cost: which worker should take a request, given what the books say about each.
//
// A pure function over plain values, so that it can be tested and reasoned about without books,
// threads or a stream. For every candidate worker (healthy, capacity known) it computes:
//   needed   = blocks the request may hold at its end, by the one KV-fit rule of
//              kvcache/kv_budget.h (for one choice: ceil((prompt_tokens + max_tokens) /
//              block_size), max_tokens capped at context_length - prompt_tokens)
//   cached   = min(matched prefix blocks, (prompt_tokens - 1) / block_size)
//              (the worker always computes the last prompt token, see kv_cache_manager.h)
//   host     = min(host-tier blocks continuing the match, that cap - cached): blocks the worker
//              copies back from its host tier instead of computing; each takes a new block
//   remote   = min(host_blocks, max(0, min(source_matched_blocks, that cap) - cached - host))
//              when the worker can receive from the query's transfer source (the same
//              non-empty kv_transfer_format, and a host tier: host_blocks > 0) and that is
//              >= min_transfer_blocks; else 0:
//              blocks the worker fetches from the source (Worker.FetchKvBlocks, into its host
//              tier) instead of computing; each takes a new block, like a host-tier block. The
//              source itself gets 0: its own pool and host runs are its whole match.
//   charged  = needed - cached + min(cached, evictable)
//              blocks the request takes out of `free` (host and remote blocks are new blocks,
//              inside needed - cached): an evictable cached block leaves the free list when
//              attached just like a new block does; only cached blocks that a running request
//              already holds come for free. The router cannot tell which cached blocks are
//              evictable, so it assumes as many as possible are (worst case).
//   available = max(0, free - reserved)       (free includes evictable, as Capacity says)
//   fits     = charged <= available, and the worker's waiting queue has room:
//              waiting + outstanding < max_waiting_requests (when the worker reports its limit;
//              a full queue would refuse the request)
//   cost     = prefill_token_cost * (prompt_tokens - (cached + host + remote) * block_size
//                                   + host_hit_token_cost * host * block_size
//                                   + transfer_token_cost * remote * block_size)
//            + pool_usage_cost * (total - available + charged) / total
//            + waiting_request_cost * (waiting + outstanding)
//            + running_request_cost * running
// and, under the kv_aware policy, picks the fitting worker with the lowest cost (ties: fewer
// outstanding requests, then the least recently chosen worker, so equal workers share an idle
// cluster evenly). For a migration (`prefer_longest_prefix`) the fitting worker that computes
// the fewest blocks (the most cached in either tier plus remote ones) wins, cost breaking ties.
// docs/routing.md has a worked example.
//
// The transfer source is chosen by the caller (ClusterBooks: of the workers able to send, the
// one with the longest match), so one decision names one source; the chosen worker's
// `remote_blocks` say whether the request goes out with it (worker.proto KvSource).
//
// The other policies (router_options.h) choose among the same fitting workers without looking at
// the prefix: round_robin the least recently chosen, least_loaded the fewest running + waiting +
// outstanding requests (ties: more available blocks, then least recently chosen), random the
// fitting worker `random_draw % fitting` in candidate order. The fit rule, the verdicts and the
// charged blocks are the policy's in none of them, so every policy admits and reserves alike;
// the chosen worker's remote blocks are planned as a transfer under every policy.
//
// Verdicts: kRouted; kNeverFits when `needed` exceeds the largest pool of any known worker (the
// request can never run: refuse it at once); kNoWorker when no candidate is routable; kNoFitNow
// when candidates exist but none has room now (wait in the admission queue).
//
// Thread-safety: pure functions.

#ifndef KVSERVE_ROUTER_ROUTING_POLICY_H_
#define KVSERVE_ROUTER_ROUTING_POLICY_H_

#include <cstdint>
#include <string_view>

#include "absl/types/span.h"
#include "router/router_options.h"

namespace kvserve {

enum class RouteVerdict { kRouted, kNoFitNow, kNeverFits, kNoWorker };
std::string_view RouteVerdictName(RouteVerdict verdict);

// What the policy needs to know about the request.
struct RoutingQuery {
  int64_t prompt_tokens = 0;   // the full context to prefill (prompt + generated on a migration)
  int64_t max_tokens = 0;      // tokens still to generate, per choice
  int32_t num_choices = 1;     // choices still to run
  int64_t context_length = 0;  // cap on one choice's prompt + output (0: none)
  int block_size = 16;
  // The largest total_blocks of any worker the router knows, routable or not.
  int64_t largest_pool_blocks = 0;
  bool prefer_longest_prefix = false;  // migration: most cached blocks first (kv_aware)
  uint64_t random_draw = 0;            // the random policy's draw
  // KV block transfer: the transfer source's leading-context match (its pool run + host-tier
  // run, in blocks) and its kv_transfer_format. 0 / empty: no source, no worker gets remote
  // blocks. The format is borrowed for the call.
  int64_t source_matched_blocks = 0;
  std::string_view source_kv_transfer_format = {};
};

// One routable worker as the policy sees it.
struct WorkerLoad {
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;  // includes evictable
  int64_t evictable_blocks = 0;
  int64_t reserved_blocks = 0;  // the router's outstanding reservations
  int32_t running_requests = 0;
  int32_t waiting_requests = 0;
  int32_t outstanding_requests = 0;  // routed by this router, not yet covered by a report
  int32_t max_waiting_requests = 0;  // the worker's waiting-queue limit (0: not reported)
  int64_t matched_blocks = 0;        // leading prompt blocks in the worker's prefix cache
  int64_t host_matched_blocks = 0;   // the blocks after those in the worker's host tier
  int64_t host_blocks = 0;           // its host tier's size (0: none, it cannot receive blocks)
  // ModelInfo.kv_transfer_format (empty: it neither sends nor receives blocks); borrowed.
  std::string_view kv_transfer_format = {};
  // When the router last chose this worker (a decision counter; 0: never). Breaks exact ties.
  uint64_t last_chosen = 0;
};

// The policy's view of one worker for one request.
struct WorkerCost {
  bool fits = false;
  int64_t cached_blocks = 0;       // in the pool
  int64_t host_cached_blocks = 0;  // after those, in the host tier
  int64_t remote_blocks = 0;       // after those, fetched from the transfer source
  int64_t charged_blocks = 0;
  double cost = 0;
};

WorkerCost CostOf(const RoutingQuery& query, const WorkerLoad& load, const RoutingWeights& weights);

struct RoutingChoice {
  RouteVerdict verdict = RouteVerdict::kNoWorker;
  int index = -1;  // into the candidates; >= 0 only for kRouted
  WorkerCost chosen;
  int64_t needed_blocks = 0;
  // The most cached blocks (either tier) any candidate holds, fitting or not: the reuse the
  // choice could have captured (routing-quality metrics; `chosen.cached_blocks +
  // chosen.host_cached_blocks` is what it captured).
  int64_t best_cached_blocks = 0;
};

RoutingChoice ChooseWorker(const RoutingQuery& query, absl::Span<const WorkerLoad> candidates,
                           const RoutingWeights& weights,
                           RoutingPolicy policy = RoutingPolicy::kKvAware);

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ROUTING_POLICY_H_
