// RequestProgress: what one proxied Generate request has produced so far, over every worker call
// it made: each choice's generated tokens, the text bytes the client received, and the completion
// tokens in total. A (re)submission's route and worker request are built from it, and every
// worker message is recorded and rewritten for the client through it (the client's request id;
// usage counted over every call).
//
// Why it exists: on a migration the next worker continues each unfinished choice from exactly
// these tokens and text bytes (worker.proto WorkerChoice), so the client sees one stream.
//
// Thread-safety: not thread-safe; its owner (GenerateCall) serialises access.
#ifndef KVSERVE_ROUTER_REQUEST_PROGRESS_H_
#define KVSERVE_ROUTER_REQUEST_PROGRESS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/worker.pb.h"
#include "router/cluster_books.h"

namespace kvserve {

// A Generate request as the service resolved it: ready to dispatch.
struct ProxiedRequest {
  std::string client_request_id;          // echoed in every response
  std::string router_request_id;          // unique in this router; keys the reservation
  std::vector<int32_t> prompt_token_ids;  // chat template and special tokens applied
  kvserve::v1::SamplingParams sampling;   // seed set, max_tokens > 0
  int priority = 0;
  std::string tenant;          // the authenticated tenant ("" without auth), for logs
  std::string cache_salt;      // from the authenticated tenant
  int64_t context_length = 0;  // one choice's prompt + output at most (pool-limited); 0: no cap
};

class RequestProgress {
 public:
  // `request` is borrowed and must outlive the progress.
  explicit RequestProgress(const ProxiedRequest* request);

  // The route of a (re)submission: the context to prefill and the blocks still needed, excluding
  // `excluded` (the workers that failed the request), preferring the longest cached prefix when
  // any worker is excluded.
  RouteRequest RouteFor(const std::vector<std::string>& excluded) const;
  // The worker call of a (re)submission that `decision` routed: every unfinished choice with what
  // it produced so far, and the KV source when the decision planned a transfer
  // (RoutingDecision::transfer_source). Once the client has the prompt logprobs, a resubmission
  // no longer asks for them (so the client gets them exactly once).
  kvserve::v1::WorkerGenerateRequest WorkerRequest(const RoutingDecision& decision) const;

  // What a worker message is to the client.
  enum class MessageKind {
    kOutput,    // output to forward
    kLast,      // output to forward, with usage: the request's last message
    kProgress,  // a progress report (worker.proto progress_interval_ms): proof that the worker
                // is working on the request, not output; the client never sees it
  };
  // Records a worker message and rewrites it for the client (request id; on the message with
  // usage: the original prompt's tokens, completion tokens over every call, the cached prompt
  // tokens this worker reported; prompt logprobs only the first time any call sends them). A
  // progress report is neither recorded nor rewritten.
  MessageKind Apply(kvserve::v1::GenerateResponse* response);

  // Every choice has its finish reason.
  bool all_finished() const;
  // Tokens generated so far, over every choice and every worker call.
  int32_t completion_tokens() const { return completion_tokens_; }
  // The closing message for a request whose choices all finished but whose usage never came (its
  // worker failed just before sending it); nullopt when the request cannot end that way.
  std::optional<kvserve::v1::GenerateResponse> UsageOnlyEnding() const;

 private:
  struct Choice {
    std::vector<int32_t> token_ids;  // generated so far, all calls
    int64_t text_bytes = 0;          // text sent to the client so far
    bool finished = false;
  };

  const ProxiedRequest* const request_;
  std::vector<Choice> choices_;
  int32_t completion_tokens_ = 0;
  bool prompt_logprobs_sent_ = false;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_REQUEST_PROGRESS_H_
