// Engine: the worker's generation engine. One engine thread owns the scheduler, the KV cache
// manager and the model runner; it loops
//   take new requests and aborts -> Scheduler::Schedule -> StepPlan -> ModelRunner::Execute
//   -> StepResult -> Scheduler::Update -> per-choice output (detokenize, stop checks) -> streams
// and publishes KV events and capacity to status subscribers. Other threads reach it only through
// the methods below, which hand work over through a mutex-guarded inbox.
//
// Usage (kvserve-worker's service layer):
//   auto engine = Engine::Create(options, std::move(runner), tokenizer, observer);
//   engine->Start();
//   auto stream = engine->Submit(request);    // per request: pop outputs until kEnd
//   engine->Abort(request_id);                // client cancel / deadline: frees blocks at once
//   auto status = engine->SubscribeStatus();  // Worker.StreamStatus
//   engine->StopAccepting(); engine->WaitIdle(grace); engine->Shutdown();   // drain
//
// Errors of Submit: INVALID_ARGUMENT naming the field for a malformed request (token id out of
// the vocabulary, n above max_n, ...); RESOURCE_EXHAUSTED when the prompt (+ generated tokens)
// leaves no room in the context window, when the request could never fit in the KV pool even
// alone, or when the waiting queue is full; UNAVAILABLE when draining or shut down (or not
// started); ALREADY_EXISTS for a request_id that is still live.
//
// Thread-safety: every public method is thread-safe. Observer callbacks run on the engine
// thread (and, for the requests Shutdown ends, on the thread calling Shutdown, after the engine
// thread has stopped). The tokenizer and observer are borrowed and must outlive the engine.
// A request_id can be reused as soon as its stream has closed.
#ifndef KVSERVE_ENGINE_ENGINE_H_
#define KVSERVE_ENGINE_ENGINE_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/engine_core.h"
#include "engine/engine_observer.h"
#include "engine/engine_options.h"
#include "engine/engine_output.h"
#include "engine/engine_stats.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/status_subscription.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

class Engine {
 public:
  // Validates options, sizes the KV pool and initialises the runner. `tokenizer` may be null
  // (then no text is produced and stop strings are refused); `observer` may be null.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                        std::unique_ptr<ModelRunner> runner,
                                                        const Tokenizer* tokenizer,
                                                        EngineObserver* observer);
  // Shuts down (see Shutdown).
  ~Engine();

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Spawns the engine thread. FAILED_PRECONDITION when already started.
  absl::Status Start();

  // Queues a request; its output arrives on the returned stream (errors: see above).
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(EngineRequest request);

  // Ends a live request at any time: its stream closes with CANCELLED and its KV blocks are
  // freed before the next step. NOT_FOUND when no live request has this id.
  absl::Status Abort(std::string_view request_id);

  // KV block transfer between workers (EngineCore::ExportKvBlocks / ImportKvBlocks): the engine
  // thread does the work between steps and then calls `done` there, so `done` must be quick. A
  // draining engine still exports (it hands its blocks over). `done` gets UNAVAILABLE when the
  // engine is not running, failed, or shuts down first.
  using ExportDone = std::function<void(absl::StatusOr<std::vector<KvBlockBytes>>)>;
  using ImportDone = std::function<void(absl::StatusOr<int>)>;
  void ExportKvBlocks(KvTransferQuery query, ExportDone done);
  void ImportKvBlocks(KvTransferQuery query, std::vector<std::string> blocks, ImportDone done);
  // EngineCore::CountHeldKvBlocks, as above.
  void CountHeldKvBlocks(KvTransferQuery query, ImportDone done);
  const std::string& kv_transfer_format() const { return core_->kv_transfer_format(); }
  int64_t kv_transfer_block_bytes() const { return core_->kv_transfer_block_bytes(); }

  // A consistent snapshot as of the last step (cheap; no wait for the engine thread).
  EngineStats Stats() const;

  // A new status subscription: its first update carries a KV snapshot (status_subscription.h).
  std::shared_ptr<StatusSubscription> SubscribeStatus();

  // Draining: Submit answers UNAVAILABLE from now on; running and waiting requests continue.
  // Status subscribers see draining = true.
  void StopAccepting();
  // Waits until no request is live (running or waiting) or the timeout passes; true when idle.
  bool WaitIdle(absl::Duration timeout);

  // Ends every live request with `status` before the next step (their blocks are freed; full
  // ones stay cached) and goes on running: a worker draining past its grace period hands its
  // blocks over (ExportKvBlocks) before it shuts down.
  void AbortAll(absl::Status status);

  // Stops the engine thread; every live request's stream closes with UNAVAILABLE (the router
  // migrates it) and its blocks are freed; subscriptions close. Idempotent.
  void Shutdown();

  // Called once, on the engine thread, when the runner fails in a step (then every live request
  // has ended with INTERNAL, UNAVAILABLE (a tensor-parallel rank gone or timed out) or
  // RESOURCE_EXHAUSTED, and Submit answers UNAVAILABLE). Set it
  // before Start.
  void SetFailureListener(std::function<void(const absl::Status&)> listener);
  // The runner's error once the engine failed; OK before.
  absl::Status failure() const;

  const EngineOptions& options() const { return options_; }
  int32_t num_kv_blocks() const;  // usable blocks of the pool
  int32_t max_context_len() const;
  int32_t vocab_size() const;
  const std::vector<int32_t>& eos_token_ids() const;

 private:
  struct Inbox {
    std::vector<std::unique_ptr<RequestState>> requests;
    std::vector<std::string> aborts;
    std::vector<std::shared_ptr<StatusSubscription>> subscriptions;
    // Work on the core between steps (KV transfer); called with null when the engine cannot.
    std::vector<std::function<void(EngineCore*)>> tasks;
    std::optional<absl::Status> abort_all;  // AbortAll's status
  };

  // What one turn of the loop took from the inbox.
  struct TakenWork {
    Inbox inbox;
    bool draining = false;     // Submit was closed (StopAccepting) when it was taken
    int32_t num_requests = 0;  // inbox.requests.size(), still counted in queued_requests_
  };

  Engine(const EngineOptions& options, std::unique_ptr<EngineCore> core);
  // The engine thread: wait, admit, step, publish, until Shutdown. The functions below are its
  // parts and run on the engine thread only.
  void Loop();
  // Waits for work (or the status heartbeat) and takes the inbox; nullopt once stopping.
  std::optional<TakenWork> WaitForWork();
  // Queues a task (Inbox::tasks), or runs it at once with null when the engine is not running.
  void Post(std::function<void(EngineCore*)> task);
  // Hands the taken tasks, requests, aborts and subscriptions to the core.
  void AdmitTaken(Inbox* inbox);
  // What the requests of a failed step end with, given the runner's error (see
  // SetFailureListener).
  static absl::Status StepFailureOutcome(const absl::Status& failure);
  // The runner failed in a step: records it, tells the listener, ends every request.
  void FailEngine(const absl::Status& failure);
  // After a step: publishes the stats, forgets finished requests, wakes WaitIdle, notifies the
  // status subscribers.
  void EndStep(bool draining, int32_t num_taken);
  // Publishes the KV events since the last call and `stats` to the subscriptions.
  void PublishStatus(const EngineStats& stats);
  // The core's stats with the engine's own limits.
  EngineStats CoreStats() const;

  const EngineOptions options_;
  std::unique_ptr<EngineCore> core_;  // engine thread only, after Start
  std::thread thread_;

  // std::mutex rather than absl::Mutex: see engine/condition_wait.h.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the engine thread waits here for work
  std::condition_variable idle_cv_;  // WaitIdle waits here for live_ to empty
  Inbox inbox_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;  // the runner failed: no new requests
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::function<void(const absl::Status&)> failure_listener_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;  // the loop should publish status once more
  // Ids of live requests (submitted, not yet finished), so that Abort and duplicate checks work
  // without the engine thread.
  absl::flat_hash_map<std::string, std::shared_ptr<RequestStream>> live_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  int32_t queued_requests_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet in stats_

  // Engine thread only.
  std::vector<std::shared_ptr<StatusSubscription>> subscriptions_;
  bool failed_engine_ = false;
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_ENGINE_H_
