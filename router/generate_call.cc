#include "router/generate_call.h"

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/raw_message.h"
#include "api/request_id.h"
#include "api/status_conversion.h"
#include "base/log.h"
#include "kvserve/v1/worker.grpc.pb.h"
#include "router/request_log.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

absl::Time DeadlineOf(const grpc::CallbackServerContext& call) {
  const auto deadline = call.deadline();
  // No deadline reads as the far future; keep it out of absl::Time's arithmetic.
  if (deadline > std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

// Worker failures after which another worker can continue the request.
bool Migratable(const absl::Status& status, bool started) {
  switch (status.code()) {
    case absl::StatusCode::kOk:  // ended without usage: the stream was cut
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kAborted:
      return true;
    case absl::StatusCode::kResourceExhausted:
      return !started;  // the worker's queue was full: try another
    default:
      return false;
  }
}

absl::Status Cancelled() { return absl::CancelledError("the client cancelled the request"); }

// Ends a call at once: a request refused before it ran.
class RefusedCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedCall(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// The gRPC client side of a GenerateCall: the server-streaming reactor of the client's call.
// gRPC owns it; it deletes itself in OnDone, after telling the call.
class GrpcGenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                                  public GenerateClient {
 public:
  GrpcGenerateReactor(GenerateProxy* proxy, grpc::CallbackServerContext* call,
                      ProxiedRequest request)
      : call_(call),
        generate_(GenerateCall::Create(proxy, this, std::move(request), DeadlineOf(*call))) {}

  void Begin() { generate_->Begin(); }

  // GenerateClient.
  std::unique_ptr<grpc::ClientContext> NewWorkerContext() override {
    return grpc::ClientContext::FromCallbackServerContext(*call_);
  }
  void Send(const v1::GenerateResponse& message) override {
    buffer_ = ToByteBuffer(message);
    StartWrite(&buffer_);
  }
  void End(const absl::Status& status) override { Finish(ToGrpcStatus(status)); }

  // gRPC's reactions.
  void OnWriteDone(bool ok) override { generate_->OnWriteDone(ok); }
  void OnCancel() override { generate_->OnCancel(); }
  void OnDone() override {
    generate_->OnClientDone();
    delete this;
  }

 private:
  grpc::CallbackServerContext* const call_;
  GenerateCall* const generate_;
  grpc::ByteBuffer buffer_;  // the message being written
};

}  // namespace

// One Worker.Generate call. Its flags are guarded by the owning GenerateCall's mu_.
class GenerateCall::Upstream final : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Upstream(GenerateCall* owner, std::string worker_id, std::shared_ptr<WorkerConnection> worker,
           v1::WorkerGenerateRequest request)
      : owner_(owner),
        worker_id_(std::move(worker_id)),
        worker_(std::move(worker)),
        context_(owner->client_->NewWorkerContext()),
        request_(std::move(request)) {
    // The worker logs the request under the client's id too.
    context_->AddMetadata(kRequestIdMetadata, owner->request_.client_request_id);
  }

  // Starts the call; it cannot end before ReleaseHold.
  void Begin() {
    tracked_ = worker_->RegisterCall(context_.get());
    worker_->stub().async()->Generate(context_.get(), &request_, this);
    AddHold();
    StartCall();
  }
  // The stall clock counts from here: while the client is still taking the previous message no
  // read is pending, and a worker cannot be late with what nobody asked for yet.
  void ReadNext() {
    worker_->NoteReadStarted(tracked_);
    StartRead(&response_);
  }
  void Cancel() { context_->TryCancel(); }
  void ReleaseHold() { RemoveHold(); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      owner_->OnUpstreamEnd();
      return;
    }
    worker_->NoteProgress(tracked_);
    owner_->OnUpstreamMessage(this);
  }
  // The owner may destroy this Upstream inside OnUpstreamDone: nothing may follow it.
  void OnDone(const grpc::Status& status) override {
    const bool lost = worker_->UnregisterCall(tracked_);
    owner_->OnUpstreamDone(this, FromGrpcStatus(status), lost);
  }

  const std::string& worker_id() const { return worker_id_; }
  v1::GenerateResponse* response() { return &response_; }

  // Guarded by the owner's mu_.
  bool started = false;        // a message arrived: the reservation is marked started
  bool got_usage = false;      // the last message (with usage) arrived
  bool cancel_sent = false;    // TryCancel was decided
  bool hold_released = false;  // no more reads will start

 private:
  GenerateCall* const owner_;
  const std::string worker_id_;
  const std::shared_ptr<WorkerConnection> worker_;
  const std::unique_ptr<grpc::ClientContext> context_;
  const v1::WorkerGenerateRequest request_;
  uint64_t tracked_ = 0;
  v1::GenerateResponse response_;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* GenerateProxy::Start(grpc::CallbackServerContext* call,
                                                                 ProxiedRequest request) {
  auto* reactor = new GrpcGenerateReactor(this, call, std::move(request));
  reactor->Begin();
  return reactor;
}

void GenerateProxy::CallStarted() {
  absl::MutexLock lock(&mu_);
  ++running_calls_;
}

void GenerateProxy::CallEnded() {
  absl::MutexLock lock(&mu_);
  --running_calls_;
}

bool GenerateProxy::WaitIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return running_calls_ == 0; };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RefuseGenerate(const grpc::Status& status) {
  return new RefusedCall(status);
}

GenerateCall* GenerateCall::Create(GenerateProxy* proxy, GenerateClient* client,
                                   ProxiedRequest request, absl::Time deadline) {
  return new GenerateCall(proxy, client, std::move(request), deadline);
}

GenerateCall::GenerateCall(GenerateProxy* proxy, GenerateClient* client, ProxiedRequest request,
                           absl::Time deadline)
    : proxy_(proxy),
      client_(client),
      request_(std::move(request)),
      deadline_(deadline),
      progress_(&request_) {
  proxy_->CallStarted();
}

GenerateCall::~GenerateCall() { proxy_->CallEnded(); }

void GenerateCall::AddHold() {
  absl::MutexLock lock(&mu_);
  ++holds_;
}

void GenerateCall::Unref() {
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    last = --holds_ == 0;
  }
  if (last) delete this;
}

// --- Route / admit -------------------------------------------------------------------------

void GenerateCall::Admit() {
  AdmissionRequest admission;
  bool stop = false;
  {
    absl::MutexLock lock(&mu_);
    ++holds_;  // this function's own: the call may end on another thread during Submit
    stop = cancelled_ || client_gone_;
    if (!stop) {
      admission =
          AdmissionRequest{progress_.RouteFor(failed_workers_), request_.priority, deadline_};
      admitting_ = true;
      ticket_ = 0;
      admission_start_ = absl::Now();
      submitter_ = std::this_thread::get_id();
      submit_returned_ = false;
      ++holds_;  // the admission callback's, until OnAdmitted returns
    }
  }
  if (stop) {
    EndWith(Cancelled());
    Unref();
    return;
  }
  AdmissionQueue* queue = proxy_->queue();
  const uint64_t ticket =
      queue->Submit(std::move(admission), [this](AdmissionOutcome o) { OnAdmitted(std::move(o)); });
  bool cancel_now = false;
  {
    absl::MutexLock lock(&mu_);
    submit_returned_ = true;
    if (ticket != 0 && admitting_) {
      ticket_ = ticket;
      cancel_now = cancelled_;  // OnCancel came before the ticket was known
    }
  }
  if (ticket != 0) proxy_->metrics()->SetQueueDepth(queue->num_waiting());
  if (cancel_now) queue->Cancel(ticket);
  Unref();
}

void GenerateCall::OnAdmitted(AdmissionOutcome outcome) {
  RouterMetrics* metrics = proxy_->metrics();
  bool stop = false;
  int attempt = 0;
  {
    absl::MutexLock lock(&mu_);
    admitting_ = false;
    const absl::Duration waited = absl::Now() - admission_start_;
    if (!submit_returned_ && std::this_thread::get_id() == submitter_) {
      metrics->RecordDecision(waited);  // routed or refused inline
    } else {
      metrics->RecordQueueWait(waited);
      metrics->SetQueueDepth(proxy_->queue()->num_waiting());
    }
    stop = cancelled_ || client_gone_;
    attempt = attempt_;
  }
  if (!outcome.decision.ok()) {
    // A call cancelled by its own deadline counts as a deadline, whichever check saw it first
    // (the client's timer usually fires, and cancels, a moment before the server's).
    const bool past_deadline = absl::Now() + absl::Milliseconds(50) >= deadline_;
    // No worker left to continue a request that workers failed (crashed, stalled, drained) is
    // not a cluster without workers: it counts as workers_failed, not no_worker.
    const bool workers_failed = attempt > 0 && outcome.refusal == AdmissionRefusal::kNoWorker;
    const absl::string_view reason = past_deadline    ? absl::string_view("deadline")
                                     : workers_failed ? absl::string_view("workers_failed")
                                                      : RefusalLabel(outcome.refusal);
    metrics->RecordRejection(reason);
    LogRequestRefused(request_.client_request_id, reason, outcome.decision.status());
    if (workers_failed) {
      absl::Status failure;
      {
        absl::MutexLock lock(&mu_);
        failure = last_failure_;
      }
      EndWith(absl::UnavailableError(absl::StrCat(
                  "no other worker can continue the request after: ", failure.message())),
              /*usage_may_end=*/true);
    } else {
      EndWith(outcome.decision.status());
    }
    Unref();
    return;
  }
  const std::string worker_id = outcome.decision->worker_id;
  if (stop) {
    proxy_->books()->Release(request_.router_request_id);
    EndWith(Cancelled());
    Unref();
    return;
  }
  std::shared_ptr<WorkerConnection> worker = proxy_->registry()->Find(worker_id);
  if (worker == nullptr) {  // removed by discovery since the decision
    proxy_->books()->Release(request_.router_request_id);
    {
      absl::MutexLock lock(&mu_);
      failed_workers_.push_back(worker_id);
    }
    Admit();
  } else {
    metrics->RecordRouted(worker_id);
    if (attempt == 0) {
      metrics->RecordRoutingQuality(outcome.decision->prompt_tokens,
                                    outcome.decision->available_cached_tokens,
                                    outcome.decision->cached_tokens);
    }
    if (!outcome.decision->transfer_source.empty()) {
      metrics->RecordTransferPlanned(outcome.decision->transfer_blocks);
    }
    OpenUpstream(*outcome.decision, std::move(worker));
  }
  Unref();
}

// --- Open upstream ---------------------------------------------------------------------------

void GenerateCall::OpenUpstream(const RoutingDecision& decision,
                                std::shared_ptr<WorkerConnection> worker) {
  v1::WorkerGenerateRequest request;
  std::string migrating_from;
  absl::Status reason;
  int32_t tokens_so_far = 0;
  {
    absl::MutexLock lock(&mu_);
    request = progress_.WorkerRequest(decision);
    ++holds_;  // the worker call's, until OnUpstreamDone
    workers_.push_back(decision.worker_id);
    migrating_from = std::exchange(migrating_from_, "");
    reason = last_failure_;
    tokens_so_far = progress_.completion_tokens();
  }
  if (!migrating_from.empty()) {
    KVSERVE_LOG(kWarning, "request_migrated")
        .Field("id", request_.client_request_id)
        .Field("from", migrating_from)
        .Field("to", decision.worker_id)
        .Field("tokens", tokens_so_far)
        .Field("reason", reason.message());
  }
  request.set_progress_interval_ms(worker->progress_interval_ms());
  auto upstream =
      std::make_shared<Upstream>(this, decision.worker_id, std::move(worker), std::move(request));
  upstream->Begin();
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    upstream_ = std::move(upstream);
    read_in_flight_ = false;
    PlanLocked(&actions);  // the first read, or cancel it when the client left meanwhile
  }
  Execute(std::move(actions));
}

// --- Forward ---------------------------------------------------------------------------------

void GenerateCall::OnUpstreamMessage(Upstream* upstream) {
  Actions actions;
  bool first = false;
  int64_t delivered = -1;  // the usage's cached prompt tokens, when this message carries usage
  {
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    if (!cancelled_ && !client_gone_) {
      // A progress report only reset the stall clock (Upstream::OnReadDone): nothing to send,
      // and the next read starts at once.
      const RequestProgress::MessageKind kind = progress_.Apply(upstream->response());
      if (kind != RequestProgress::MessageKind::kProgress) {
        first = !upstream->started;
        upstream->started = true;
        if (!first_message_time_.has_value()) first_message_time_ = absl::Now();
        if (kind == RequestProgress::MessageKind::kLast) {
          upstream->got_usage = true;
          delivered = upstream->response()->usage().cached_prompt_tokens();
          cached_tokens_ = delivered;
        }
        write_message_.Swap(upstream->response());  // the next read starts after the send
        write_in_flight_ = true;
        actions.write = true;
      }
    }
    PlanLocked(&actions);
  }
  if (first) proxy_->books()->MarkStarted(request_.router_request_id);
  if (delivered >= 0) proxy_->metrics()->RecordDeliveredReuse(delivered);
  Execute(std::move(actions));
}

void GenerateCall::OnWriteDone(bool ok) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) {
      client_gone_ = true;
      if (pending_finish_.has_value()) pending_finish_ = Cancelled();
      last_message_.reset();
    }
    PlanLocked(&actions);
  }
  Execute(std::move(actions));
}

void GenerateCall::OnUpstreamEnd() {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    read_in_flight_ = false;
    if (upstream_ != nullptr && !upstream_->hold_released) {
      upstream_->hold_released = true;
      actions.release_hold = upstream_;
    }
  }
  Execute(std::move(actions));
}

// --- Migrate or finish -----------------------------------------------------------------------

void GenerateCall::OnUpstreamDone(Upstream* upstream, absl::Status status, bool lost) {
  // A worker whose waiting queue was full refused the request before it ran (a capacity refusal:
  // api/status_conversion.h): not a failure of the worker but a full cluster. Its books count
  // the queue full until its next report (marked before the release below wakes the router's
  // waiters), and the request goes back to the router's queue, neither a migration nor excluding
  // that worker.
  bool queue_was_full = false;
  if (IsCapacityRefusal(status)) {
    bool started = true;
    {
      absl::MutexLock lock(&mu_);
      started = upstream->started;
    }
    queue_was_full = !started && proxy_->books()->MarkQueueFull(upstream->worker_id()).ok();
  }
  proxy_->books()->Release(request_.router_request_id);
  RouterMetrics* metrics = proxy_->metrics();
  std::shared_ptr<Upstream> ended;  // destroyed on return, after the last use of `upstream`
  bool client_stopped = false;
  bool all_finished = false;
  int attempt = 0;
  {
    absl::MutexLock lock(&mu_);
    ended = std::move(upstream_);
    read_in_flight_ = false;
    client_stopped = cancelled_ || client_gone_;
    all_finished = progress_.all_finished();
    attempt = attempt_;
  }
  const std::string worker_id = upstream->worker_id();
  if (lost && !client_stopped) {
    // The connection cancelled it: the worker stopped answering or the stream stalled.
    status = absl::UnavailableError(absl::StrCat("worker ", worker_id, " stopped answering"));
  }
  if (client_stopped) {
    EndWith(Cancelled());
  } else if (queue_was_full) {
    Admit();
  } else if (status.ok() && upstream->got_usage) {
    EndWith(absl::OkStatus());
  } else if (!Migratable(status, upstream->started)) {
    metrics->RecordRejection(
        status.code() == absl::StatusCode::kInvalidArgument    ? "invalid_argument"
        : status.code() == absl::StatusCode::kDeadlineExceeded ? "deadline"
                                                               : "worker_error");
    EndWith(status);  // the request's own error (e.g. a bad sampling field): as the worker said
  } else {
    const absl::Status failure =
        status.ok() ? absl::UnavailableError("the worker's stream ended without usage") : status;
    if (all_finished) {
      EndWith(failure, /*usage_may_end=*/true);  // only the usage message is missing
    } else if (attempt >= proxy_->max_migrations()) {
      metrics->RecordRejection("migrations_exhausted");
      EndWith(absl::UnavailableError(absl::StrCat(
                  "worker ", worker_id, " failed (", failure.message(),
                  ") and the request already moved ", attempt, " times (--max_migrations)")),
              /*usage_may_end=*/true);
    } else {
      metrics->RecordMigration();
      {
        absl::MutexLock lock(&mu_);
        last_failure_ = failure;
        failed_workers_.push_back(worker_id);
        migrating_from_ = worker_id;
        ++attempt_;
      }
      Admit();
    }
  }
  Unref();
}

void GenerateCall::EndWith(absl::Status status, bool usage_may_end) {
  Actions actions;
  {
    absl::MutexLock lock(&mu_);
    if (pending_finish_.has_value() || finished_) return;
    std::optional<v1::GenerateResponse> usage_only;
    if (usage_may_end) usage_only = progress_.UsageOnlyEnding();
    if (usage_only.has_value() && !client_gone_ && !cancelled_) {
      last_message_ = *std::move(usage_only);
      status = absl::OkStatus();
    }
    pending_finish_ = std::move(status);
    PlanLocked(&actions);
  }
  Execute(std::move(actions));
}

// --- Plan / execute --------------------------------------------------------------------------

void GenerateCall::PlanLocked(Actions* actions) {
  if (finished_) return;
  const bool stopping = cancelled_ || client_gone_;
  if (upstream_ != nullptr) {
    Upstream& upstream = *upstream_;
    if (stopping && !upstream.cancel_sent) {
      upstream.cancel_sent = true;
      actions->cancel = upstream_;
    }
    if (!upstream.hold_released && !read_in_flight_) {
      if (stopping) {
        upstream.hold_released = true;
        actions->release_hold = upstream_;
      } else if (!write_in_flight_ && !actions->write) {
        read_in_flight_ = true;
        actions->read = upstream_;
      }
    }
    return;
  }
  if (!pending_finish_.has_value() || admitting_ || write_in_flight_ || actions->write) return;
  if (last_message_.has_value()) {
    write_message_ = *std::move(last_message_);
    last_message_.reset();
    write_in_flight_ = true;
    actions->write = true;
    return;
  }
  finished_ = true;
  actions->finish = pending_finish_;
}

void GenerateCall::Execute(Actions actions) {
  // The client side may react inline (a send it completes at once, an end it is done with), so
  // this call must outlive its own actions.
  AddHold();
  if (actions.cancel != nullptr) actions.cancel->Cancel();
  if (actions.write) client_->Send(write_message_);
  if (actions.read != nullptr) actions.read->ReadNext();
  if (actions.release_hold != nullptr) actions.release_hold->ReleaseHold();
  if (actions.finish.has_value()) {
    proxy_->metrics()->RecordFinished(absl::StatusCodeToString(actions.finish->code()));
    LogDone(*actions.finish);
    client_->End(*actions.finish);
  }
  Unref();
}

void GenerateCall::LogDone(const absl::Status& status) {
  if (!LogEnabled(LogLevel::kInfo)) return;
  const absl::Time now = absl::Now();
  // Filled under the lock, written (when `event` goes out of scope) after it is released.
  LogEvent event(LogLevel::kInfo, "request_done");
  event.Field("id", request_.client_request_id);
  if (!request_.tenant.empty()) event.Field("tenant", request_.tenant);
  absl::MutexLock lock(&mu_);
  event.Field("workers", absl::StrJoin(workers_, ","))
      .Field("prompt_tokens", request_.prompt_token_ids.size())
      .Field("cached_tokens", cached_tokens_)
      .Field("output_tokens", progress_.completion_tokens())
      .FieldMs("ttft_ms", first_message_time_.has_value() ? *first_message_time_ - start_
                                                          : absl::ZeroDuration())
      .FieldMs("total_ms", now - start_)
      .Field("migrations", attempt_)
      .Status(status);
}

// --- Client side -----------------------------------------------------------------------------

void GenerateCall::OnCancel() {
  Actions actions;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (admitting_) ticket = ticket_;
    if (pending_finish_.has_value() && !finished_) {
      pending_finish_ = Cancelled();
      last_message_.reset();
    }
    PlanLocked(&actions);
  }
  // Its callback (CANCELLED) ends the call; false: the callback is running elsewhere and sees
  // cancelled_.
  if (ticket != 0) proxy_->queue()->Cancel(ticket);
  Execute(std::move(actions));
}

}  // namespace kvserve
