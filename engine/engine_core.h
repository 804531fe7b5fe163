// EngineCore: the single-threaded heart of the engine: the KV cache manager, the scheduler, the
// model runner and the per-choice output processing, advanced one Step() at a time. Engine
// (engine.h) wraps it in the engine thread and the cross-thread inbox; tests drive it directly,
// step by step, and inspect each plan.
//
// One Step(): Scheduler::Schedule -> ModelRunner::Execute -> Scheduler::Update -> for each
// sampled token its ChoiceState (text, stop rules) -> finished choices free their blocks ->
// each request's new output is pushed to its stream (a request without output that asked for them
// gets a progress report instead, at most one per step); finished requests get usage and close.
//
// Thread-safety: not thread-safe; one thread owns it. Exception: ValidateRequest and MakeRequest
// read only what Create fixed, so any thread may call them while the owner steps.
#ifndef KVSERVE_ENGINE_ENGINE_CORE_H_
#define KVSERVE_ENGINE_ENGINE_CORE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/engine_observer.h"
#include "engine/engine_options.h"
#include "engine/engine_stats.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/request_stream.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "kvcache/kv_cache_manager.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

// KV block transfer between workers (docs/kv-cache.md): the full blocks first_block ..
// first_block + max_blocks - 1 of `tokens`, with `cache_salt` in block 0's hash.
struct KvTransferQuery {
  std::vector<TokenId> tokens = {};
  std::string cache_salt = {};
  int first_block = 0;
  int max_blocks = 0;  // 0: every full block from first_block on
};

// One block's K/V, as the runner's KvTransferFormat lays it out.
struct KvBlockBytes {
  int index = 0;  // the block's position in the sequence
  BlockHash hash;
  std::string data;
};

class EngineCore {
 public:
  // Validates options, sizes the pool (num_kv_blocks, else kv_memory_bytes / KvBytesPerBlock,
  // else from the runner's ProfileKvBytes),
  // initialises the runner and creates the manager. `tokenizer`, `observer` may be null.
  static absl::StatusOr<std::unique_ptr<EngineCore>> Create(const EngineOptions& options,
                                                            std::unique_ptr<ModelRunner> runner,
                                                            const Tokenizer* tokenizer,
                                                            EngineObserver* observer);

  // Everything Submit checks but the queue bound and draining (engine.h lists the codes).
  absl::Status ValidateRequest(const EngineRequest& request) const;

  // Builds the request's state (choices, stop rules); REQUIRES: ValidateRequest was OK.
  std::unique_ptr<RequestState> MakeRequest(EngineRequest request,
                                            std::shared_ptr<RequestStream> stream,
                                            absl::Time submit_time) const;

  // Takes a request into the scheduler. ALREADY_EXISTS when one with the same id is live.
  absl::Status AddRequest(std::unique_ptr<RequestState> request);

  // Ends a live request: frees its blocks, closes its stream with `status` (no usage).
  // NOT_FOUND when no live request has the id.
  absl::Status AbortRequest(std::string_view request_id, const absl::Status& status);
  // AbortRequest for every live request.
  void AbortAll(const absl::Status& status);

  // Binds the calling thread to the runner's device (ModelRunner::BindThread): a thread other
  // than the creating one calls it once before its first Step.
  absl::Status BindThread() { return runner_->BindThread(); }

  // Runs one step (nothing when there is no work). A runner error is returned as is; the
  // caller should then AbortAll.
  absl::Status Step();

  bool has_work() const { return scheduler_->has_work(); }
  int32_t num_live_requests() const { return static_cast<int32_t>(requests_.size()); }
  bool IsLive(const std::string& request_id) const { return requests_.contains(request_id); }

  // KV block transfer, between steps. Export: the query's blocks this cache holds (pool or host
  // tier), in order, up to the first it does not; FAILED_PRECONDITION when the runner cannot move
  // blocks. Import: enters blocks query.first_block, ... of query.tokens, whose K/V `blocks`
  // holds (one per block, in order), into the host tier for the next prompt with that prefix;
  // returns how many leading blocks of them this cache now holds (written, or held already).
  // FAILED_PRECONDITION without a host tier or transfer; INVALID_ARGUMENT for a block of the
  // wrong size or blocks past the tokens' full blocks.
  absl::StatusOr<std::vector<KvBlockBytes>> ExportKvBlocks(const KvTransferQuery& query);
  absl::StatusOr<int> ImportKvBlocks(const KvTransferQuery& query,
                                     absl::Span<const std::string> blocks);
  // The leading full blocks of query.tokens this cache holds (pool, then host tier).
  int CountHeldKvBlocks(const KvTransferQuery& query) const;
  // The runner's KvTransferFormat and block bytes, fixed at Create (any thread may read them).
  const std::string& kv_transfer_format() const { return kv_transfer_format_; }
  int64_t kv_transfer_block_bytes() const { return kv_transfer_block_bytes_; }

  EngineStats Stats() const;
  // The plan of the last Step (for tests and debugging).
  const StepPlan& last_plan() const { return last_plan_; }

  KvCacheManager& manager() { return *manager_; }
  const KvCacheManager& manager() const { return *manager_; }
  int32_t num_kv_blocks() const { return num_kv_blocks_; }
  int32_t max_context_len() const { return max_context_len_; }
  int32_t vocab_size() const { return vocab_size_; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }
  const EngineOptions& options() const { return options_; }

 private:
  EngineCore(const EngineOptions& options, std::unique_ptr<ModelRunner> runner,
             std::unique_ptr<KvCacheManager> manager, const Tokenizer* tokenizer,
             EngineObserver* observer, int32_t num_kv_blocks, int32_t max_context_len);

  // Pushes each request's pending output, or a progress report to one that has none and asked
  // for it (EngineRequest::progress_interval); finishes the requests whose choices all finished.
  void Deliver(absl::Time now);
  // Removes the request: frees its sequences, reports it, closes its stream with `status`.
  void EndRequest(RequestState* request, const absl::Status& status, absl::Time now);

  const EngineOptions options_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCacheManager> manager_;
  const Tokenizer* tokenizer_;
  EngineObserver* observer_;
  const int32_t num_kv_blocks_;
  const int32_t max_context_len_;
  const int32_t vocab_size_;
  const std::vector<int32_t> eos_token_ids_;
  const std::string kv_transfer_format_;
  const int64_t kv_transfer_block_bytes_;
  std::unique_ptr<Scheduler> scheduler_;
  absl::flat_hash_map<std::string, std::unique_ptr<RequestState>> requests_;
  StepPlan last_plan_;
  int64_t num_steps_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_ENGINE_CORE_H_
