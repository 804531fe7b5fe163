#include "router/worker_connection.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/serving_fingerprint.h"
#include "base/log.h"

namespace kvserve {

WorkerConnection::WorkerConnection(std::string address,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials,
                                   ClusterBooks* books, WorkerConnectionOptions options)
    : address_(std::move(address)), books_(books), options_(std::move(options)) {
  grpc::ChannelArguments args;
  // Reconnect quickly after a worker restarts; the default backoff can reach two minutes.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.max_backoff)));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.initial_backoff)));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.initial_backoff)));
  // Keepalive: a frozen worker (its kernel still ACKs TCP, the process answers nothing) closes
  // the transport within keepalive_time + keepalive_timeout, failing every call on it.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  channel_ = grpc::CreateCustomChannel(address_, credentials, args);
  stub_ = kvserve::v1::Worker::NewStub(channel_);
}

WorkerConnection::~WorkerConnection() { Stop(); }

void WorkerConnection::Start() {
  thread_ = std::thread([this] { Run(); });
  watchdog_ = std::thread([this] { Watch(); });
}

void WorkerConnection::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
  if (watchdog_.joinable()) watchdog_.join();
}

uint64_t WorkerConnection::RegisterCall(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_call_++;
  calls_.emplace(id, TrackedCall{.context = context, .last_progress = absl::Now()});
  return id;
}

void WorkerConnection::NoteProgress(uint64_t call) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(call);
  if (it == calls_.end()) return;
  it->second.last_progress = absl::Now();
  it->second.reading = false;
}

void WorkerConnection::NoteReadStarted(uint64_t call) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(call);
  if (it == calls_.end()) return;
  it->second.last_progress = absl::Now();
  it->second.reading = true;
}

int32_t WorkerConnection::progress_interval_ms() const {
  return static_cast<int32_t>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.stream_progress_timeout / 4)));
}

bool WorkerConnection::UnregisterCall(uint64_t call) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(call);
  if (it == calls_.end()) return false;
  const bool lost = it->second.cancelled_as_lost;
  calls_.erase(it);
  return lost;
}

void WorkerConnection::Watch() {
  const absl::Duration tick = absl::Milliseconds(100);
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping_), tick)) {
    const absl::Time now = absl::Now();
    if (status_stream_open_ && !liveness_expired_ &&
        now - last_status_ > options_.liveness_timeout && active_ != nullptr) {
      // Not routable until its status flows again (the stream is reopened for a snapshot), but
      // its requests keep running: a worker too busy to publish is slow, not dead. A stopped
      // process is caught by keepalive, a stream that makes no progress by its own deadline.
      // Logged by the status thread (NoteUnresponsive) when the stream ends.
      liveness_expired_ = true;
      active_->TryCancel();
    }
    for (auto& entry : calls_) {
      TrackedCall& call = entry.second;
      if (call.reading && !call.cancelled_as_lost &&
          now - call.last_progress > options_.stream_progress_timeout) {
        call.cancelled_as_lost = true;
        call.context->TryCancel();
      }
    }
  }
}

std::optional<kvserve::v1::ModelInfo> WorkerConnection::model_info() const {
  absl::MutexLock lock(&mu_);
  return model_info_;
}

void WorkerConnection::Changed() const {
  if (options_.on_books_changed) options_.on_books_changed();
}

bool WorkerConnection::SleepUnlessStopped(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), duration);
  return !stopping_;
}

bool WorkerConnection::FetchModelInfo() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  // Wait for the connection rather than failing fast while the channel backs off: a worker that
  // is still starting is picked up as soon as it listens.
  context.set_wait_for_ready(true);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    active_ = &context;  // so that Stop() need not wait for the deadline
  }
  kvserve::v1::ModelInfo info;
  grpc::Status status = stub_->GetModelInfo(&context, kvserve::v1::GetModelInfoRequest(), &info);
  {
    absl::MutexLock lock(&mu_);
    active_ = nullptr;
    if (stopping_) return false;
  }
  if (!status.ok()) {
    NoteUnreachable(status);
    return false;
  }
  std::string refusal;
  if (options_.fingerprint.has_value()) {
    refusal = FingerprintMismatch(*options_.fingerprint, info.fingerprint());
  }
  // A refused worker's blocks are not the router's workers' blocks: it neither sends nor receives.
  std::string kv_transfer_format = refusal.empty() ? info.kv_transfer_format() : "";
  bool log_refusal = false;
  bool log_acceptance = false;
  {
    absl::MutexLock lock(&mu_);
    log_refusal = !refusal.empty() && refusal != refused_reason_;
    log_acceptance = refusal.empty() && !refused_reason_.empty();
    refused_reason_ = refusal;
    if (refusal.empty()) {
      model_info_ = std::move(info);
    } else {
      model_info_.reset();  // not one of the router's workers: its limits must not count
    }
  }
  // The canary's verdict, when it changes: a refused worker's prefix hashes would not match the
  // router's, so it gets no requests.
  if (log_refusal) {
    KVSERVE_LOG(kWarning, "worker_refused")
        .Field("worker", address_)
        .Field("reason", absl::StrCat("serving fingerprint differs from the router's: ", refusal));
  }
  if (log_acceptance) {
    KVSERVE_LOG(kInfo, "worker_accepted")
        .Field("worker", address_)
        .Field("reason", "serving fingerprint matches the router's");
  }
  (void)books_->SetKvTransferFormat(address_, std::move(kv_transfer_format));
  (void)books_->MarkRefused(address_, refusal);
  Changed();
  return refusal.empty();
}

bool WorkerConnection::StreamOnce() {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return false;
    active_ = &context;
  }
  {
    absl::MutexLock lock(&mu_);
    status_stream_open_ = true;
    liveness_expired_ = false;
    last_status_ = absl::Now();
  }
  kvserve::v1::StatusRequest request;
  request.set_router_id(options_.router_id);
  request.set_min_interval_ms(options_.status_interval_ms);
  std::unique_ptr<grpc::ClientReader<kvserve::v1::WorkerStatus>> reader =
      stub_->StreamStatus(&context, request);
  kvserve::v1::WorkerStatus status;
  bool resync = false;
  bool cancelled = false;
  bool delivered = false;
  while (reader->Read(&status)) {
    {
      absl::MutexLock lock(&mu_);
      last_status_ = absl::Now();
    }
    if (cancelled) continue;  // drain what is in flight
    absl::StatusOr<ApplyResult> applied = books_->ApplyStatus(address_, status);
    if (!applied.ok()) {
      KVSERVE_LOG(kWarning, "worker_status_rejected")
          .Field("worker", address_)
          .Status(applied.status());
      context.TryCancel();  // reconnect after a backoff; the worker stays unroutable meanwhile
      cancelled = true;
      continue;
    }
    if (!delivered) {
      delivered = true;
      NoteConnected();
    }
    if (applied->resync_needed) {
      context.TryCancel();
      cancelled = resync = true;
    }
    Changed();
  }
  const grpc::Status finished = reader->Finish();
  bool silent = false;
  bool stopping = false;
  {
    absl::MutexLock lock(&mu_);
    active_ = nullptr;
    status_stream_open_ = false;
    silent = liveness_expired_;
    stopping = stopping_;
  }
  if (silent) {
    NoteUnresponsive();
  } else if (!resync && !stopping && !cancelled) {
    if (delivered) {
      NoteLost(finished);
    } else {
      NoteUnreachable(finished);
    }
  }
  // A stream cancelled for silence is reopened at once, like a resync: the worker is routable
  // again as soon as its next snapshot arrives.
  return resync || silent;
}

void WorkerConnection::NoteConnected() {
  const absl::Time now = absl::Now();
  if (link_ == LinkState::kNew) {
    KVSERVE_LOG(kInfo, "worker_connected").Field("worker", address_);
  } else if (link_ != LinkState::kUp) {
    KVSERVE_LOG(kInfo, "worker_reconnected")
        .Field("worker", address_)
        .Field("was", link_ == LinkState::kUnresponsive ? "unresponsive" : "down")
        .FieldMs("down_ms", now - down_since_)
        .Field("attempts", failed_attempts_);
  }
  link_ = LinkState::kUp;
  failed_attempts_ = 0;
}

void WorkerConnection::NoteLost(const grpc::Status& status) {
  const absl::Time now = absl::Now();
  if (link_ == LinkState::kUp || link_ == LinkState::kUnresponsive) {
    KVSERVE_LOG(kWarning, "worker_lost")
        .Field("worker", address_)
        .Field("code", absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())))
        .Field("error", status.error_message());
    if (link_ == LinkState::kUp) down_since_ = now;
    link_ = LinkState::kDown;
    last_down_log_ = now;
  }
}

void WorkerConnection::NoteUnresponsive() {
  const absl::Time now = absl::Now();
  if (link_ == LinkState::kUnresponsive && now - last_down_log_ < kDownLogInterval) return;
  if (link_ != LinkState::kUnresponsive) down_since_ = now;
  KVSERVE_LOG(kWarning, "worker_unresponsive")
      .Field("worker", address_)
      .FieldMs("silent_ms", now - down_since_ + options_.liveness_timeout)
      .Field("note",
             "no status within --worker_liveness_timeout_s: no new requests until it "
             "publishes again; its running requests go on");
  link_ = LinkState::kUnresponsive;
  last_down_log_ = now;
}

void WorkerConnection::NoteUnreachable(const grpc::Status& status) {
  const absl::Time now = absl::Now();
  ++failed_attempts_;
  const absl::StatusCode code = static_cast<absl::StatusCode>(status.error_code());
  KVSERVE_LOG(kDebug, "worker_connect_failed")
      .Field("worker", address_)
      .Field("attempt", failed_attempts_)
      .Field("code", absl::StatusCodeToString(code))
      .Field("error", status.error_message());
  if (link_ == LinkState::kDown && now - last_down_log_ < kDownLogInterval) return;
  if (link_ != LinkState::kDown) down_since_ = now;
  KVSERVE_LOG(kWarning, "worker_unreachable")
      .Field("worker", address_)
      .FieldMs("down_ms", now - down_since_)
      .Field("attempts", failed_attempts_)
      .Field("code", absl::StatusCodeToString(code))
      .Field("error", status.error_message());
  link_ = LinkState::kDown;
  last_down_log_ = now;
}

void WorkerConnection::Run() {
  absl::Duration backoff = options_.initial_backoff;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    const absl::Time started = absl::Now();
    const bool resync = FetchModelInfo() && StreamOnce();
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
    }
    // Requests still streaming from a worker whose status stream ended are not touched here:
    // if the worker is gone their own streams break (keepalive); if it is alive but silent they
    // go on, each under its progress deadline (Watch).
    (void)books_->MarkUnreachable(address_);
    Changed();
    if (resync) continue;
    // A stream that lived a while was healthy: start the backoff over.
    if (absl::Now() - started > options_.max_backoff) backoff = options_.initial_backoff;
    if (!SleepUnlessStopped(backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace kvserve
