#include "engine/engine.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/condition_wait.h"

namespace kvserve {
namespace {

// How often an idle engine publishes its status anyway (worker.proto StreamStatus).
constexpr std::chrono::milliseconds kStatusHeartbeat(500);

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       std::unique_ptr<ModelRunner> runner,
                                                       const Tokenizer* tokenizer,
                                                       EngineObserver* observer) {
  absl::StatusOr<std::unique_ptr<EngineCore>> core =
      EngineCore::Create(options, std::move(runner), tokenizer, observer);
  if (!core.ok()) return core.status();
  return std::unique_ptr<Engine>(new Engine(options, *std::move(core)));
}

Engine::Engine(const EngineOptions& options, std::unique_ptr<EngineCore> core)
    : options_(options), core_(std::move(core)) {
  stats_ = CoreStats();
}

Engine::~Engine() { Shutdown(); }

EngineStats Engine::CoreStats() const {
  EngineStats stats = core_->Stats();
  stats.max_waiting_requests = options_.max_waiting_requests;
  return stats;
}

absl::Status Engine::Start() {
  std::unique_lock<std::mutex> lock(mu_);
  if (started_) return absl::FailedPreconditionError("engine already started");
  if (stopping_) return absl::FailedPreconditionError("engine was shut down");
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(EngineRequest request) {
  // ValidateRequest reads only state fixed at construction, so it runs on the caller's thread.
  KVSERVE_RETURN_IF_ERROR(core_->ValidateRequest(request));
  // Building the request state (a migrated choice replays its text) also needs no lock.
  const std::string request_id = request.request_id;
  auto stream = std::make_shared<RequestStream>(request_id);
  std::unique_ptr<RequestState> state = core_->MakeRequest(std::move(request), stream, absl::Now());
  std::unique_lock<std::mutex> lock(mu_);
  if (!started_) return absl::UnavailableError("engine not started");
  if (failed_) {
    return absl::UnavailableError(
        absl::StrCat("this worker's engine failed (", failure_.message(), "); retry elsewhere"));
  }
  if (stopping_) return absl::UnavailableError("engine is shut down");
  if (!accepting_) return absl::UnavailableError("engine is draining");
  if (auto it = live_.find(request_id); it != live_.end()) {
    // A closed stream's request is over; the engine thread forgets it after its step.
    if (it->second->closed()) {
      live_.erase(it);
    } else {
      return absl::AlreadyExistsError(absl::StrCat("request_id: ", request_id, " is already live"));
    }
  }
  if (stats_.waiting_requests + queued_requests_ >= options_.max_waiting_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("waiting queue is full (", options_.max_waiting_requests, " requests)"));
  }
  live_[request_id] = stream;
  inbox_.requests.push_back(std::move(state));
  ++queued_requests_;
  work_cv_.notify_one();
  return stream;
}

absl::Status Engine::Abort(std::string_view request_id_view) {
  const std::string request_id(request_id_view);
  std::unique_lock<std::mutex> lock(mu_);
  auto it = live_.find(request_id);
  if (it == live_.end() || it->second->closed()) {
    return absl::NotFoundError(absl::StrCat("request_id: no live request ", request_id));
  }
  inbox_.aborts.emplace_back(request_id);
  work_cv_.notify_one();
  return absl::OkStatus();
}

void Engine::Post(std::function<void(EngineCore*)> task) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (started_ && !stopping_ && !failed_) {
      inbox_.tasks.push_back(std::move(task));
      work_cv_.notify_one();
      return;
    }
  }
  task(nullptr);
}

void Engine::AbortAll(absl::Status status) {
  std::unique_lock<std::mutex> lock(mu_);
  inbox_.abort_all = std::move(status);
  work_cv_.notify_one();
}

void Engine::ExportKvBlocks(KvTransferQuery query, ExportDone done) {
  Post([query = std::move(query), done = std::move(done)](EngineCore* core) {
    if (core == nullptr) return done(absl::UnavailableError("the engine is not running"));
    done(core->ExportKvBlocks(query));
  });
}

void Engine::ImportKvBlocks(KvTransferQuery query, std::vector<std::string> blocks,
                            ImportDone done) {
  Post([query = std::move(query), blocks = std::move(blocks),
        done = std::move(done)](EngineCore* core) {
    if (core == nullptr) return done(absl::UnavailableError("the engine is not running"));
    done(core->ImportKvBlocks(query, blocks));
  });
}

void Engine::CountHeldKvBlocks(KvTransferQuery query, ImportDone done) {
  Post([query = std::move(query), done = std::move(done)](EngineCore* core) {
    if (core == nullptr) return done(absl::UnavailableError("the engine is not running"));
    done(core->CountHeldKvBlocks(query));
  });
}

EngineStats Engine::Stats() const {
  std::unique_lock<std::mutex> lock(mu_);
  return stats_;
}

std::shared_ptr<StatusSubscription> Engine::SubscribeStatus() {
  auto subscription = std::make_shared<StatusSubscription>();
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) {
    subscription->Close();
  } else {
    inbox_.subscriptions.push_back(subscription);
    work_cv_.notify_one();
  }
  return subscription;
}

void Engine::StopAccepting() {
  std::unique_lock<std::mutex> lock(mu_);
  accepting_ = false;
  stats_.draining = true;
  wake_ = true;
  work_cv_.notify_one();
}

bool Engine::WaitIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return WaitWithTimeout(idle_cv_, lock, timeout, [this] { return live_.empty(); });
}

void Engine::Shutdown() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    accepting_ = false;
    work_cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  // The engine thread is gone: this thread owns the core now.
  Inbox inbox;
  {
    std::unique_lock<std::mutex> lock(mu_);
    std::swap(inbox, inbox_);
  }
  const absl::Status unavailable = absl::UnavailableError("engine shut down");
  for (auto& request : inbox.requests) request->stream->Close(unavailable);
  for (auto& subscription : inbox.subscriptions) subscription->Close();
  for (auto& task : inbox.tasks) task(nullptr);
  core_->AbortAll(unavailable);
  for (auto& subscription : subscriptions_) subscription->Close();
  subscriptions_.clear();
  std::unique_lock<std::mutex> lock(mu_);
  live_.clear();
  idle_cv_.notify_all();
  stats_ = CoreStats();
  stats_.draining = true;
}

void Engine::SetFailureListener(std::function<void(const absl::Status&)> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  failure_listener_ = std::move(listener);
}

absl::Status Engine::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

int32_t Engine::num_kv_blocks() const { return core_->num_kv_blocks(); }
int32_t Engine::max_context_len() const { return core_->max_context_len(); }
int32_t Engine::vocab_size() const { return core_->vocab_size(); }
const std::vector<int32_t>& Engine::eos_token_ids() const { return core_->eos_token_ids(); }

void Engine::Loop() {
  // The runner was created and initialised on another thread: select its device on this one.
  if (absl::Status status = core_->BindThread(); !status.ok()) FailEngine(status);
  while (true) {
    std::optional<TakenWork> taken = WaitForWork();
    if (!taken.has_value()) return;  // stopping
    AdmitTaken(&taken->inbox);
    if (!failed_engine_) {
      if (absl::Status status = core_->Step(); !status.ok()) FailEngine(status);
    }
    EndStep(taken->draining, taken->num_requests);
  }
}

std::optional<Engine::TakenWork> Engine::WaitForWork() {
  const bool busy = core_->has_work();
  std::unique_lock<std::mutex> lock(mu_);
  // An idle engine still wakes every kStatusHeartbeat and publishes its status, so a router can
  // tell a live idle worker from a frozen one (router/worker_connection.h).
  work_cv_.wait_for(lock, kStatusHeartbeat, [this, busy] {
    return busy || stopping_ || wake_ || !inbox_.requests.empty() || !inbox_.aborts.empty() ||
           !inbox_.subscriptions.empty() || !inbox_.tasks.empty() || inbox_.abort_all.has_value();
  });
  if (stopping_) return std::nullopt;
  TakenWork taken;
  std::swap(taken.inbox, inbox_);
  wake_ = false;
  taken.draining = !accepting_;
  taken.num_requests = static_cast<int32_t>(taken.inbox.requests.size());
  return taken;
}

void Engine::AdmitTaken(Inbox* inbox) {
  for (auto& task : inbox->tasks) task(failed_engine_ ? nullptr : core_.get());
  for (auto& request : inbox->requests) {
    std::shared_ptr<RequestStream> stream = request->stream;
    if (failed_engine_) {
      stream->Close(absl::UnavailableError("engine failed"));
    } else if (absl::Status status = core_->AddRequest(std::move(request)); !status.ok()) {
      stream->Close(status);
    }
  }
  for (const std::string& id : inbox->aborts) {
    core_->AbortRequest(id, absl::CancelledError("request aborted")).IgnoreError();
  }
  if (inbox->abort_all.has_value()) core_->AbortAll(*inbox->abort_all);
  for (auto& subscription : inbox->subscriptions) subscriptions_.push_back(subscription);
}

absl::Status Engine::StepFailureOutcome(const absl::Status& failure) {
  // A runner failure is the worker's, not the request's: UNAVAILABLE when a rank of a
  // tensor-parallel group is gone or timed out (UNAVAILABLE / DEADLINE_EXCEEDED from the
  // communicator; DEADLINE_EXCEEDED would read as the client's own deadline), RESOURCE_EXHAUSTED
  // when the device ran out of memory, else INTERNAL (the router migrates all three).
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (failure.code()) {
    case absl::StatusCode::kResourceExhausted:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat("engine failed: ", failure.message()));
}

void Engine::FailEngine(const absl::Status& failure) {
  failed_engine_ = true;
  // Say so first (Submit refuses, health turns NOT_SERVING), then end the requests: a router
  // that retries one elsewhere must not pick this worker again.
  std::function<void(const absl::Status&)> listener;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = failure;
    failed_ = true;
    listener = failure_listener_;
  }
  if (listener) listener(failure);
  core_->AbortAll(StepFailureOutcome(failure));
}

void Engine::EndStep(bool draining, int32_t num_taken) {
  EngineStats stats = CoreStats();
  stats.draining = draining;
  stats.failed = failed_engine_;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stats_ = stats;
    // The taken requests now count in stats_.waiting_requests (or already ran).
    queued_requests_ -= num_taken;
    failed_ = failed_engine_;
    // Forget finished requests (their streams are closed).
    for (auto it = live_.begin(); it != live_.end();) {
      auto current = it++;
      if (current->second->closed()) live_.erase(current);
    }
    if (live_.empty()) idle_cv_.notify_all();
  }
  PublishStatus(stats);
}

void Engine::PublishStatus(const EngineStats& stats) {
  KvEventBatch batch;
  core_->manager().DrainEvents(&batch);
  std::vector<KvEventBatch> batches;
  if (!batch.events.empty()) batches.push_back(std::move(batch));
  for (auto it = subscriptions_.begin(); it != subscriptions_.end();) {
    StatusSubscription& subscription = **it;
    if (subscription.closed()) {
      it = subscriptions_.erase(it);
      continue;
    }
    bool published = false;
    if (!subscription.needs_snapshot()) {
      published = subscription.Publish(std::nullopt, batches, stats, stats.draining);
    }
    if (!published) {
      // First update, or the consumer fell behind: a snapshot as of the batch just drained.
      subscription.Publish(core_->manager().Snapshot(), {}, stats, stats.draining);
    }
    ++it;
  }
}

}  // namespace kvserve
