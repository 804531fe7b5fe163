#include "engine/engine_core.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kvcache/kv_budget.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<EngineCore>> EngineCore::Create(const EngineOptions& options,
                                                               std::unique_ptr<ModelRunner> runner,
                                                               const Tokenizer* tokenizer,
                                                               EngineObserver* observer) {
  KVSERVE_RETURN_IF_ERROR(options.Validate());
  if (runner == nullptr) return absl::InvalidArgumentError("runner: must not be null");
  const int32_t model_context = runner->max_context_len();
  if (options.max_context_len > model_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_context_len: must be <= the model's context window (", model_context,
                     "), got ", options.max_context_len));
  }
  const int32_t max_context_len =
      options.max_context_len > 0 ? options.max_context_len : model_context;
  RunnerConfig runner_config{.block_size = options.block_size,
                             .num_blocks = 0,
                             .max_num_batched_tokens = options.max_num_batched_tokens,
                             .max_num_seqs = options.max_num_seqs,
                             .max_context_len = max_context_len};
  int64_t num_blocks = options.num_kv_blocks;
  if (num_blocks == 0) {
    int64_t kv_bytes = options.kv_memory_bytes;
    if (kv_bytes == 0) {  // the device decides: what is left after a profiling step
      KVSERVE_ASSIGN_OR_RETURN(int64_t profiled, runner->ProfileKvBytes(runner_config));
      // The null block comes on top of the usable ones: keep its room inside the budget.
      kv_bytes = profiled - runner->KvBytesPerBlock(options.block_size);
    }
    const int64_t block_bytes = runner->KvBytesPerBlock(options.block_size);
    num_blocks = kv_bytes / std::max<int64_t>(block_bytes, 1);
    if (num_blocks < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kv_memory_bytes: ", kv_bytes, " bytes hold no KV block of ", block_bytes, " bytes"));
    }
    num_blocks = std::min<int64_t>(num_blocks, 1 << 30);
  }
  runner_config.num_blocks = static_cast<int32_t>(num_blocks) + 1;
  if (options.host_kv_bytes > 0) {
    const int64_t block_bytes = std::max<int64_t>(runner->KvBytesPerBlock(options.block_size), 1);
    const int64_t num_host_blocks = options.host_kv_bytes / block_bytes;
    if (num_host_blocks < 1) {
      return absl::InvalidArgumentError(absl::StrCat("host_kv_bytes: ", options.host_kv_bytes,
                                                     " bytes hold no KV block of ", block_bytes,
                                                     " bytes"));
    }
    runner_config.num_host_blocks =
        static_cast<int32_t>(std::min<int64_t>(num_host_blocks, 1 << 30));
  }
  KVSERVE_RETURN_IF_ERROR(runner->Initialize(runner_config));
  absl::StatusOr<std::unique_ptr<KvCacheManager>> manager =
      KvCacheManager::Create({.num_blocks = runner_config.num_blocks,
                              .block_size = options.block_size,
                              .epoch = options.kv_epoch,
                              .num_host_blocks = runner_config.num_host_blocks});
  if (!manager.ok()) return manager.status();
  return std::unique_ptr<EngineCore>(
      new EngineCore(options, std::move(runner), *std::move(manager), tokenizer, observer,
                     static_cast<int32_t>(num_blocks), max_context_len));
}

EngineCore::EngineCore(const EngineOptions& options, std::unique_ptr<ModelRunner> runner,
                       std::unique_ptr<KvCacheManager> manager, const Tokenizer* tokenizer,
                       EngineObserver* observer, int32_t num_kv_blocks, int32_t max_context_len)
    : options_(options),
      runner_(std::move(runner)),
      manager_(std::move(manager)),
      tokenizer_(tokenizer),
      observer_(observer),
      num_kv_blocks_(num_kv_blocks),
      max_context_len_(max_context_len),
      vocab_size_(runner_->vocab_size()),
      eos_token_ids_(runner_->eos_token_ids()),
      kv_transfer_format_(runner_->KvTransferFormat()),
      kv_transfer_block_bytes_(runner_->KvTransferBlockBytes()),
      scheduler_(std::make_unique<Scheduler>(
          SchedulerConfig{.max_num_seqs = options.max_num_seqs,
                          .max_num_batched_tokens = options.max_num_batched_tokens,
                          .max_prefill_tokens_per_step = options.max_prefill_tokens_per_step,
                          .step_time_target_ms = options.step_time_target_ms,
                          .max_queue_wait = absl::Milliseconds(options.max_queue_wait_ms),
                          .swap_preemption = options.preemption_mode == PreemptionMode::kSwap,
                          .defer_host_loads = options.defer_host_loads},
          manager_.get(), observer)) {}

namespace {

absl::Status CheckTokenIds(const std::string& field, absl::Span<const int32_t> ids, int32_t vocab) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i, "]: token id ", ids[i], " is outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EngineCore::ValidateRequest(const EngineRequest& request) const {
  KVSERVE_RETURN_IF_ERROR(ValidateRequestFields(request));
  const SamplingOptions& s = request.sampling;
  const int32_t max_n = std::min(options_.max_n, options_.max_num_seqs);
  if (request.n > max_n) {
    return absl::InvalidArgumentError(absl::StrCat("n: must be <= ", max_n, ", got ", request.n));
  }
  if (s.logprobs.has_value() && *s.logprobs > options_.max_logprobs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.logprobs: must be <= ", options_.max_logprobs, ", got ", *s.logprobs));
  }
  if (s.prompt_logprobs.has_value() && *s.prompt_logprobs > options_.max_logprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.prompt_logprobs: must be <= ", options_.max_logprobs, ", got ",
                     *s.prompt_logprobs));
  }
  if (static_cast<int32_t>(s.stop.size()) > options_.max_stop_strings) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.stop: at most ", options_.max_stop_strings, " stop strings"));
  }
  if (!s.stop.empty() && tokenizer_ == nullptr) {
    return absl::InvalidArgumentError("sampling.stop: this engine has no tokenizer");
  }
  KVSERVE_RETURN_IF_ERROR(CheckTokenIds("prompt_token_ids", request.prompt_token_ids, vocab_size_));
  KVSERVE_RETURN_IF_ERROR(CheckTokenIds("sampling.stop_token_ids", s.stop_token_ids, vocab_size_));
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_token_ids.size());
  int64_t longest = prompt_len;
  for (size_t i = 0; i < request.choices.size(); ++i) {
    const auto& generated = request.choices[i].generated_token_ids;
    KVSERVE_RETURN_IF_ERROR(CheckTokenIds(absl::StrCat("choices[", i, "].generated_token_ids"),
                                          generated, vocab_size_));
    longest = std::max<int64_t>(longest, prompt_len + static_cast<int64_t>(generated.size()));
  }
  if (longest >= max_context_len_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt_token_ids: ", longest, " tokens leave no room in the context window of ",
        max_context_len_, " tokens"));
  }
  // The one KV-fit rule (kvcache/kv_budget.h), as the service layer's ValidateKvFit applies it:
  // every choice run to its end, capped at the context the pool can hold.
  const int64_t pool_context = std::min<int64_t>(
      max_context_len_, static_cast<int64_t>(num_kv_blocks_) * options_.block_size);
  const KvBudget budget =
      KvBudgetFor(prompt_len, s.max_tokens, request.n, pool_context, options_.block_size);
  if (budget.blocks > num_kv_blocks_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sampling.max_tokens: the request needs ", budget.blocks, " KV blocks (", prompt_len,
        " prompt tokens, up to ", budget.output_tokens, " output tokens x n = ",
        std::max(request.n, 1), ") but the pool holds ", num_kv_blocks_, " blocks"));
  }
  return absl::OkStatus();
}

std::unique_ptr<RequestState> EngineCore::MakeRequest(EngineRequest request,
                                                      std::shared_ptr<RequestStream> stream,
                                                      absl::Time submit_time) const {
  auto state = std::make_unique<RequestState>();
  state->request = std::move(request);
  state->stream = std::move(stream);
  state->submit_time = submit_time;
  state->last_message_time = submit_time;
  const SamplingOptions& s = state->request.sampling;
  state->stop_rules.stop_token_ids.insert(s.stop_token_ids.begin(), s.stop_token_ids.end());
  if (!s.ignore_eos) {
    state->stop_rules.stop_token_ids.insert(eos_token_ids_.begin(), eos_token_ids_.end());
  }
  state->stop_rules.max_tokens = s.max_tokens > 0 ? s.max_tokens : max_context_len_;
  state->stop_rules.max_context_len = max_context_len_;
  std::vector<ChoiceStart> starts = state->request.choices;
  if (starts.empty()) {
    starts.resize(state->request.n);
    for (int32_t i = 0; i < state->request.n; ++i) starts[i].index = i;
  }
  const int32_t prompt_len = static_cast<int32_t>(state->request.prompt_token_ids.size());
  for (const ChoiceStart& start : starts) {
    state->choices.push_back(std::make_unique<ChoiceState>(
        start, &state->request.sampling, &state->stop_rules, prompt_len, tokenizer_));
  }
  return state;
}

absl::Status EngineCore::AddRequest(std::unique_ptr<RequestState> request) {
  const std::string& id = request->request.request_id;
  if (requests_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("request_id: ", id, " is already live"));
  }
  RequestState* raw = request.get();
  requests_[id] = std::move(request);
  scheduler_->AddRequest(raw);
  return absl::OkStatus();
}

void EngineCore::EndRequest(RequestState* request, const absl::Status& status, absl::Time now) {
  scheduler_->RemoveRequest(request);
  if (observer_ != nullptr) {
    RequestMetrics metrics;
    metrics.log_id =
        request->request.log_id.empty() ? request->request.request_id : request->request.log_id;
    metrics.status = status;
    metrics.num_preemptions = request->num_preemptions;
    metrics.aborted = !status.ok();
    metrics.prompt_tokens = static_cast<int32_t>(request->request.prompt_token_ids.size());
    for (const auto& choice : request->choices) {
      metrics.completion_tokens += choice->num_new_tokens();
      if (choice->finished()) metrics.finish_reason = choice->finish_reason();
    }
    if (metrics.aborted) metrics.finish_reason = FinishReason::kAbort;
    metrics.cached_prompt_tokens = request->cached_prompt_tokens;
    if (request->first_token_time.has_value()) {
      metrics.time_to_first_token = *request->first_token_time - request->submit_time;
    }
    if (request->first_scheduled_time.has_value()) {
      metrics.queue_time = *request->first_scheduled_time - request->submit_time;
    }
    metrics.e2e_latency = now - request->submit_time;
    observer_->OnRequestFinished(metrics);
  }
  request->stream->Close(status);
  requests_.erase(request->request.request_id);
}

absl::Status EngineCore::AbortRequest(std::string_view request_id_view,
                                      const absl::Status& status) {
  const std::string request_id(request_id_view);
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return absl::NotFoundError(absl::StrCat("request_id: no live request ", request_id));
  }
  EndRequest(it->second.get(), status, absl::Now());
  return absl::OkStatus();
}

void EngineCore::AbortAll(const absl::Status& status) {
  std::vector<std::string> ids;
  for (const auto& [id, request] : requests_) ids.push_back(id);
  for (const std::string& id : ids) AbortRequest(id, status).IgnoreError();
}

absl::Status EngineCore::Step() {
  if (!scheduler_->has_work()) return absl::OkStatus();
  // A request that wants progress reports every `interval` gets them only between steps: keep
  // each step within twice the shortest such interval, so a report is never more than about
  // three intervals apart.
  absl::Duration shortest_interval = absl::InfiniteDuration();
  for (const auto& [id, request] : requests_) {
    const absl::Duration interval = request->request.progress_interval;
    if (interval > absl::ZeroDuration()) shortest_interval = std::min(shortest_interval, interval);
  }
  scheduler_->SetStepTimeBound(
      shortest_interval == absl::InfiniteDuration() ? absl::ZeroDuration() : 2 * shortest_interval);
  const absl::Time start = absl::Now();
  StepPlan plan = scheduler_->Schedule(start);
  for (Sequence* seq : scheduler_->TakeStalled()) {
    // The pool cannot hold this sequence's next token even with nothing else running.
    if (seq->is_prefix()) {
      for (auto& choice : seq->request->choices) choice->Finish(FinishReason::kLength);
    } else {
      seq->request->choices[seq->choice]->Finish(FinishReason::kLength);
    }
    scheduler_->FinishSequence(seq);
  }
  StepMetrics attention;  // counted before Update moves the sequences on
  if (observer_ != nullptr) scheduler_->CountAttention(plan, &attention);
  bool waited_for_host_loads = false;
  if (!plan.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(StepResult result, runner_->Execute(plan));
    waited_for_host_loads = result.waited_for_host_loads;
    KVSERVE_ASSIGN_OR_RETURN(std::vector<SequenceToken> tokens, scheduler_->Update(plan, result));
    const absl::Time now = absl::Now();
    for (const SequenceToken& token : tokens) {
      RequestState* request = token.sequence->request;
      if (!request->first_token_time.has_value()) request->first_token_time = now;
      absl::Duration inter_token;
      ChoiceState& choice = *request->choices[token.sequence->choice];
      const bool first = choice.num_new_tokens() == 0;
      const bool finished = choice.OnToken(*token.sampled, now, &inter_token);
      if (!first && observer_ != nullptr) observer_->OnTokenEmitted(inter_token);
      if (finished) scheduler_->FinishSequence(token.sequence);
    }
  }
  const absl::Time end = absl::Now();
  Deliver(end);
  ++num_steps_;
  if (!plan.sequences.empty()) {
    StepMetrics metrics;
    metrics.duration = end - start;
    for (const ScheduledSequence& seq : plan.sequences) {
      metrics.num_scheduled_tokens += seq.num_scheduled_tokens;
      (IsDecode(seq) ? metrics.num_decode_tokens : metrics.num_prefill_tokens) +=
          seq.num_scheduled_tokens;
    }
    scheduler_->OnStepDone(metrics.num_decode_tokens, metrics.num_prefill_tokens, metrics.duration);
    if (observer_ != nullptr) {
      metrics.num_seqs = static_cast<int32_t>(plan.sequences.size());
      metrics.num_prefill_attended_tokens = attention.num_prefill_attended_tokens;
      metrics.num_decode_context_tokens = attention.num_decode_context_tokens;
      for (const HostCopy& copy : plan.host_copies) {
        ++(copy.to_host ? metrics.num_host_stores : metrics.num_host_loads);
      }
      metrics.waited_for_host_loads = waited_for_host_loads;
      metrics.num_running_requests = scheduler_->num_running_requests();
      metrics.num_waiting_requests = scheduler_->num_waiting_requests();
      observer_->OnStep(metrics);
    }
  }
  last_plan_ = std::move(plan);
  return absl::OkStatus();
}

void EngineCore::Deliver(absl::Time now) {
  std::vector<RequestState*> finished;
  for (auto& [id, request] : requests_) {
    EngineOutput output;
    bool all_finished = true;
    for (auto& choice : request->choices) all_finished = all_finished && choice->finished();
    // Prompt logprobs go out once, no later than any choice's first output, which waits for
    // them (a choice that ran ahead of the first one's prefill); a request ending without them
    // (a choice stalled in prefill) sends its output without.
    const bool owes_prompt_logprobs =
        request->wants_prompt_logprobs() && !request->prompt_logprobs_delivered;
    if (owes_prompt_logprobs && request->prompt_scores_complete()) {
      output.prompt_logprobs.emplace();
      // The first prompt token: nothing before it scores it (rank 0, logprob 0).
      SampledToken first;
      first.token = request->request.prompt_token_ids[0];
      output.prompt_logprobs->push_back(MakePositionLogprobs(first, tokenizer_));
      for (const SampledToken& scored : request->prompt_scores) {
        output.prompt_logprobs->push_back(MakePositionLogprobs(scored, tokenizer_));
      }
      request->prompt_logprobs_delivered = true;
    }
    const bool hold_choices =
        owes_prompt_logprobs && !output.prompt_logprobs.has_value() && !all_finished;
    for (auto& choice : request->choices) {
      if (hold_choices) break;
      if (std::optional<ChoiceOutput> out = choice->TakeOutput(); out.has_value()) {
        output.choices.push_back(*std::move(out));
      }
    }
    if (all_finished) {
      Usage usage;
      usage.prompt_tokens = static_cast<int32_t>(request->request.prompt_token_ids.size());
      for (const auto& choice : request->choices)
        usage.completion_tokens += choice->num_new_tokens();
      usage.cached_prompt_tokens = request->cached_prompt_tokens;
      output.usage = usage;
      finished.push_back(request.get());
    }
    const absl::Duration progress_interval = request->request.progress_interval;
    if (!output.choices.empty() || output.usage.has_value() || output.prompt_logprobs.has_value()) {
      request->stream->Push(std::move(output));
      request->last_message_time = now;
    } else if (progress_interval > absl::ZeroDuration() &&
               now - request->last_message_time >= progress_interval) {
      // No output this step (prefilling, or waiting): say the request is still being worked on.
      output.prefill_computed_tokens = request->num_computed_context_tokens;
      request->stream->Push(std::move(output));
      request->last_message_time = now;
    }
  }
  for (RequestState* request : finished) EndRequest(request, absl::OkStatus(), now);
}

EngineStats EngineCore::Stats() const {
  const KvCacheStats kv = manager_->Stats();
  EngineStats stats;
  stats.block_size = manager_->block_size();
  stats.epoch = manager_->epoch();
  stats.total_blocks = kv.total_blocks;
  stats.free_blocks = kv.free_blocks;
  stats.evictable_blocks = kv.evictable_blocks;
  stats.used_blocks = kv.used_blocks;
  stats.cached_blocks = kv.cached_blocks;
  stats.host_blocks = kv.host_blocks;
  stats.host_cached_blocks = kv.host_cached_blocks;
  stats.host_stored_blocks = kv.host_stored_blocks;
  stats.host_loaded_blocks = kv.host_loaded_blocks;
  stats.running_requests = scheduler_->num_running_requests();
  stats.waiting_requests = scheduler_->num_waiting_requests();
  stats.running_sequences = scheduler_->num_running_sequences();
  stats.num_preemptions = scheduler_->num_preemptions();
  stats.prefix_query_tokens = kv.prefix_query_tokens;
  stats.prefix_hit_tokens = kv.prefix_hit_tokens;
  stats.prefix_host_hit_tokens = kv.prefix_host_hit_tokens;
  stats.num_steps = num_steps_;
  return stats;
}

absl::StatusOr<std::vector<KvBlockBytes>> EngineCore::ExportKvBlocks(const KvTransferQuery& query) {
  if (kv_transfer_format_.empty()) {
    return absl::FailedPreconditionError("this worker's runner cannot move KV blocks");
  }
  const int full_blocks = static_cast<int>(query.tokens.size()) / manager_->block_size();
  const int max_blocks = query.max_blocks > 0 ? query.max_blocks : full_blocks;
  std::vector<KvBlockBytes> blocks;
  for (const KvBlockLocation& location :
       manager_->LocateBlocks(query.tokens, query.cache_salt, query.first_block, max_blocks)) {
    KvBlockBytes& block = blocks.emplace_back();
    block.index = location.index;
    block.hash = location.hash;
    block.data.reserve(static_cast<size_t>(kv_transfer_block_bytes_));
    KVSERVE_RETURN_IF_ERROR(runner_->ReadKvBlock(location.device, location.host, &block.data));
  }
  return blocks;
}

int EngineCore::CountHeldKvBlocks(const KvTransferQuery& query) const {
  return static_cast<int>(
      manager_
          ->LocateBlocks(query.tokens, query.cache_salt, 0,
                         static_cast<int>(query.tokens.size()) / manager_->block_size())
          .size());
}

absl::StatusOr<int> EngineCore::ImportKvBlocks(const KvTransferQuery& query,
                                               absl::Span<const std::string> blocks) {
  if (kv_transfer_format_.empty()) {
    return absl::FailedPreconditionError("this worker's runner cannot move KV blocks");
  }
  for (size_t j = 0; j < blocks.size(); ++j) {
    if (static_cast<int64_t>(blocks[j].size()) != kv_transfer_block_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat("block ", query.first_block + j, " is ",
                                                     blocks[j].size(), " bytes, not ",
                                                     kv_transfer_block_bytes_));
    }
  }
  KVSERVE_ASSIGN_OR_RETURN(
      std::vector<HostBlockId> entries,
      manager_->ImportHostBlocks(query.tokens, query.cache_salt, query.first_block,
                                 static_cast<int>(blocks.size())));
  for (size_t j = 0; j < entries.size(); ++j) {
    if (entries[j] == kNoHostBlock) continue;  // held already
    // Cannot fail: the entry is in range and the size was checked.
    KVSERVE_RETURN_IF_ERROR(runner_->WriteHostKvBlock(entries[j], blocks[j]));
  }
  return static_cast<int>(entries.size());
}

}  // namespace kvserve
