#include "router/generate_proxy.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

// The outcome of a queued admission, handed from the queue's callback to the waiting handler.
struct PendingAdmission {
  absl::Mutex mu;
  std::optional<absl::StatusOr<RoutingDecision>> outcome ABSL_GUARDED_BY(mu);
  bool done() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return outcome.has_value(); }
};

absl::Time DeadlineOf(const grpc::ServerContext& context) {
  const auto deadline = context.deadline();
  // No deadline reads as the far future; keep it out of absl::Time's arithmetic.
  if (deadline > std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

absl::string_view RejectionReason(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return absl::StrContains(status.message(), "queue") ? "queue_full" : "never_fits";
    case absl::StatusCode::kUnavailable:
      return "no_worker";
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    default:
      return "worker_error";
  }
}

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Worker failures after which another worker can continue the request.
bool Migratable(const grpc::Status& status, bool started) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:  // ended without usage: the stream was cut
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::ABORTED:
      return true;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return !started;  // the worker's queue was full: try another
    default:
      return false;
  }
}

}  // namespace

GenerateProxy::GenerateProxy(WorkerRegistry* registry, ClusterBooks* books, AdmissionQueue* queue,
                             RouterMetrics* metrics, int max_migrations)
    : registry_(registry),
      books_(books),
      queue_(queue),
      metrics_(metrics),
      max_migrations_(max_migrations) {}

RouteRequest GenerateProxy::RouteFor(const ProxiedRequest& request,
                                     const std::vector<ChoiceProgress>& choices,
                                     const std::vector<std::string>& excluded) const {
  RouteRequest route;
  route.request_id = request.router_request_id;
  route.tokens = request.prompt_token_ids;
  route.context_length = request.context_length;
  // The KV budget as kvcache/kv_budget.h counts it. With one choice its generated tokens are part
  // of the context to prefill (and of the prefix a worker may have cached) and only the rest is
  // still to generate; with several, only the shared prompt is, and each unfinished choice can
  // still reach prompt + max_tokens.
  if (choices.size() == 1) {
    route.tokens.insert(route.tokens.end(), choices[0].token_ids.begin(),
                        choices[0].token_ids.end());
    route.max_tokens = std::max<int64_t>(
        1, request.sampling.max_tokens() - static_cast<int64_t>(choices[0].token_ids.size()));
    route.num_choices = 1;
  } else {
    route.max_tokens = std::max<int64_t>(request.sampling.max_tokens(), 1);
    route.num_choices = static_cast<int32_t>(std::max<int64_t>(
        1, std::count_if(choices.begin(), choices.end(),
                         [](const ChoiceProgress& choice) { return !choice.finished; })));
  }
  route.cache_salt = request.cache_salt;
  route.excluded_workers = excluded;
  route.prefer_longest_prefix = !excluded.empty();
  return route;
}

absl::StatusOr<RoutingDecision> GenerateProxy::Admit(grpc::ServerContext& server_context,
                                                     RouteRequest route, int priority) {
  auto pending = std::make_shared<PendingAdmission>();
  const std::string request_id = route.request_id;
  AdmissionRequest admission{std::move(route), priority, DeadlineOf(server_context)};
  const absl::Time start = absl::Now();
  const uint64_t ticket =
      queue_->Submit(std::move(admission), [pending](absl::StatusOr<RoutingDecision> outcome) {
        absl::MutexLock lock(&pending->mu);
        pending->outcome = std::move(outcome);
      });
  if (ticket == 0) {
    metrics_->RecordDecision(absl::Now() - start);
  } else {
    metrics_->SetQueueDepth(queue_->num_waiting());
    while (true) {
      {
        absl::MutexLock lock(&pending->mu);
        if (pending->mu.AwaitWithTimeout(absl::Condition(pending.get(), &PendingAdmission::done),
                                         absl::Milliseconds(20))) {
          break;
        }
      }
      // Cancel() refuses the waiter with CANCELLED; a waiter admitted meanwhile is released below.
      if (server_context.IsCancelled()) queue_->Cancel(ticket);
      queue_->ExpireOverdue();
    }
    metrics_->RecordQueueWait(absl::Now() - start);
    metrics_->SetQueueDepth(queue_->num_waiting());
  }
  absl::MutexLock lock(&pending->mu);
  absl::StatusOr<RoutingDecision> outcome = std::move(*pending->outcome);
  if (outcome.ok() && server_context.IsCancelled()) {
    books_->Release(request_id);
    return absl::CancelledError("the client cancelled the request");
  }
  return outcome;
}

grpc::Status GenerateProxy::Run(grpc::ServerContext& server_context, const ProxiedRequest& request,
                                const Writer& write) {
  const int n = std::max(1, request.sampling.n());
  std::vector<ChoiceProgress> choices(n);
  std::vector<std::string> failed_workers;
  int32_t completion_tokens = 0;
  grpc::Status last_failure;
  // Ends the stream after a failure no worker can take over. A request whose choices all ended
  // lacks only its usage message: the router sends it (usage and OK). Any other request could
  // not be completed, so it ends with `failure` (UNAVAILABLE), also when some output was already
  // sent: FINISH_REASON_ABORT means a choice the server ended on purpose (output.proto), not
  // one that was lost.
  auto end_early = [&](const grpc::Status& failure) {
    const bool all_finished = std::all_of(choices.begin(), choices.end(),
                                          [](const ChoiceProgress& c) { return c.finished; });
    if (!all_finished || completion_tokens == 0) return failure;
    v1::GenerateResponse last;
    last.set_request_id(request.client_request_id);
    v1::Usage* usage = last.mutable_usage();
    usage->set_prompt_tokens(static_cast<int32_t>(request.prompt_token_ids.size()));
    usage->set_completion_tokens(completion_tokens);
    return write(last) ? grpc::Status::OK
                       : grpc::Status(grpc::StatusCode::CANCELLED, "the client is gone");
  };

  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<RoutingDecision> decision =
        Admit(server_context, RouteFor(request, choices, failed_workers), request.priority);
    if (!decision.ok()) {
      // A call cancelled by its own deadline counts as a deadline, whichever check saw it first
      // (the client's timer usually fires, and cancels, a moment before the server's).
      const bool past_deadline = absl::Now() + absl::Milliseconds(50) >= DeadlineOf(server_context);
      metrics_->RecordRejection(past_deadline ? "deadline" : RejectionReason(decision.status()));
      if (attempt > 0 && decision.status().code() == absl::StatusCode::kUnavailable) {
        return end_early(
            grpc::Status(grpc::StatusCode::UNAVAILABLE,
                         absl::StrCat("no other worker can continue the request after: ",
                                      last_failure.error_message())));
      }
      return ToGrpc(decision.status());
    }
    const std::string worker_id = decision->worker_id;
    std::shared_ptr<WorkerConnection> worker = registry_->Find(worker_id);
    if (worker == nullptr) {  // removed by discovery since the decision
      books_->Release(request.router_request_id);
      failed_workers.push_back(worker_id);
      continue;
    }
    metrics_->RecordRouted(worker_id);

    v1::WorkerGenerateRequest call;
    call.set_request_id(request.router_request_id);
    call.mutable_prompt_token_ids()->Add(request.prompt_token_ids.begin(),
                                         request.prompt_token_ids.end());
    *call.mutable_sampling() = request.sampling;
    call.set_cache_salt(request.cache_salt);
    for (int i = 0; i < n; ++i) {
      if (choices[i].finished) continue;
      v1::WorkerChoice* choice = call.add_choices();
      choice->set_index(i);
      choice->mutable_generated_token_ids()->Add(choices[i].token_ids.begin(),
                                                 choices[i].token_ids.end());
      choice->set_emitted_text_bytes(choices[i].text_bytes);
    }

    std::unique_ptr<grpc::ClientContext> context =
        grpc::ClientContext::FromServerContext(server_context);
    const uint64_t tracked = worker->RegisterCall(context.get());
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
        worker->stub().Generate(context.get(), call);
    v1::GenerateResponse response;
    bool started = false;
    bool got_usage = false;
    bool client_gone = false;
    while (reader->Read(&response)) {
      worker->NoteProgress(tracked);
      if (client_gone) continue;  // cancelled: drain what is in flight
      if (!started) {
        books_->MarkStarted(request.router_request_id);
        started = true;
      }
      for (const v1::ChoiceDelta& delta : response.choices()) {
        if (delta.index() < 0 || delta.index() >= n) continue;
        ChoiceProgress& choice = choices[delta.index()];
        choice.token_ids.insert(choice.token_ids.end(), delta.token_ids().begin(),
                                delta.token_ids().end());
        choice.text_bytes += static_cast<int64_t>(delta.text().size());
        completion_tokens += delta.token_ids_size();
        if (delta.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) choice.finished = true;
      }
      if (response.has_usage()) {
        got_usage = true;
        const int32_t prompt_tokens = static_cast<int32_t>(request.prompt_token_ids.size());
        // The worker that finished the request counts the prompt tokens it found cached.
        const int32_t cached = std::min(response.usage().cached_prompt_tokens(), prompt_tokens);
        v1::Usage* usage = response.mutable_usage();
        usage->set_prompt_tokens(prompt_tokens);
        usage->set_completion_tokens(completion_tokens);
        usage->set_cached_prompt_tokens(cached);
      }
      response.set_request_id(request.client_request_id);
      if (!write(response)) {
        context->TryCancel();
        client_gone = true;
      }
    }
    grpc::Status status = reader->Finish();
    books_->Release(request.router_request_id);
    if (worker->UnregisterCall(tracked) && !client_gone && !server_context.IsCancelled()) {
      // The connection cancelled it: the worker stopped answering or the stream stalled.
      status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            absl::StrCat("worker ", worker_id, " stopped answering"));
    }
    if (client_gone || server_context.IsCancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request");
    }
    if (status.ok() && got_usage) return grpc::Status::OK;
    if (!Migratable(status, started)) {
      metrics_->RecordRejection(
          status.error_code() == grpc::StatusCode::INVALID_ARGUMENT    ? "invalid_argument"
          : status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? "deadline"
                                                                       : "worker_error");
      return status;  // the request's own error (e.g. a bad sampling field): as the worker said
    }
    last_failure = status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                              "the worker's stream ended without usage")
                               : status;
    if (std::all_of(choices.begin(), choices.end(),
                    [](const ChoiceProgress& choice) { return choice.finished; })) {
      return end_early(last_failure);  // every choice ended; only the usage message is missing
    }
    if (attempt >= max_migrations_) {
      metrics_->RecordRejection("migrations_exhausted");
      return end_early(grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("worker ", worker_id, " failed (", last_failure.error_message(),
                       ") and the request already moved ", attempt, " times (--max_migrations)")));
    }
    metrics_->RecordMigration();
    failed_workers.push_back(worker_id);
  }
}

}  // namespace kvserve
