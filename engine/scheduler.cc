#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* manager,
                     EngineObserver* observer)
    : config_(config), manager_(manager), observer_(observer) {}

Sequence* Scheduler::NewSequence(RequestState* request, int32_t choice,
                                 std::vector<TokenId> tokens) {
  auto seq = std::make_unique<Sequence>();
  seq->id = next_sequence_id_++;
  seq->request = request;
  seq->choice = choice;
  seq->tokens = std::move(tokens);
  if (choice >= 0) {
    const SamplingOptions& s = request->request.sampling;
    kernels::SamplingParams& p = seq->sampling.params;
    p.temperature = s.temperature;
    p.top_k = s.top_k;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.repetition_penalty = s.repetition_penalty;
    p.presence_penalty = s.presence_penalty;
    p.frequency_penalty = s.frequency_penalty;
    p.seed = ChoiceSeed(s.seed, request->choices[choice]->index());
    p.num_logprobs = s.logprobs.value_or(0);
    p.want_logprobs = s.logprobs.has_value();
    seq->sampling.logprobs = s.logprobs.has_value();
    seq->sampling.constraint = s.constraint;
    // The first choice's sequence computes the prompt's logprobs for the request.
    if (choice == 0 && s.prompt_logprobs.has_value()) {
      seq->sampling.prompt_logprobs = *s.prompt_logprobs;
    }
    seq->sampling.num_prompt_tokens =
        static_cast<int32_t>(request->request.prompt_token_ids.size());
  }
  ++request->num_live_sequences;
  Sequence* raw = seq.get();
  sequences_[raw->id] = std::move(seq);
  return raw;
}

void Scheduler::AddRequest(RequestState* request) {
  const std::vector<TokenId>& prompt = request->request.prompt_token_ids;
  const int32_t prompt_len = static_cast<int32_t>(prompt.size());
  const int32_t block_size = manager_->block_size();
  const int32_t shared_len = (prompt_len - 1) / block_size * block_size;
  // A request that wants prompt logprobs runs no shared prefix: its first choice computes the
  // whole prompt itself (the logits of every prompt position), the others as usual.
  if (request->choices.size() > 1 && shared_len > 0 && !request->wants_prompt_logprobs()) {
    // Prefill the prompt's full blocks once, then fork them into the choices (ForkPrefix).
    waiting_.push_back(NewSequence(
        request, -1, std::vector<TokenId>(prompt.begin(), prompt.begin() + shared_len)));
    return;
  }
  for (size_t c = 0; c < request->choices.size(); ++c) {
    std::vector<TokenId> tokens = prompt;
    const std::vector<int32_t>& generated = request->choices[c]->generated();
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    waiting_.push_back(NewSequence(request, static_cast<int32_t>(c), std::move(tokens)));
  }
}

int32_t Scheduler::Weight(const Sequence& seq) const {
  return seq.is_prefix() ? static_cast<int32_t>(seq.request->choices.size()) : 1;
}

void Scheduler::Release(Sequence* seq, StepPlan* plan) {
  if (seq->runner_knows) {
    if (plan != nullptr) {
      plan->released.push_back(seq->id);
    } else {
      pending_release_.push_back(seq->id);
    }
  }
  seq->runner_knows = false;
  seq->runner_num_tokens = 0;
  seq->runner_num_blocks = 0;
}

void Scheduler::Erase(Sequence* seq) {
  --seq->request->num_live_sequences;
  sequences_.erase(seq->id);
}

void Scheduler::RemoveRunning(Sequence* seq, bool preempted) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  if (it != running_.end()) {
    running_.erase(it);
    running_weight_ -= Weight(*seq);
  }
  // NOT_FOUND only if never admitted.
  if (preempted) {
    manager_->PreemptSequence(seq->id, config_.swap_preemption).IgnoreError();
  } else {
    manager_->FreeSequence(seq->id).IgnoreError();
  }
}

void Scheduler::RemoveRequest(RequestState* request) {
  std::vector<Sequence*> doomed;
  for (auto& [id, seq] : sequences_) {
    if (seq->request == request) doomed.push_back(seq.get());
  }
  for (Sequence* seq : doomed) {
    Remove(seq);
    Release(seq, nullptr);
    Erase(seq);
  }
}

void Scheduler::Remove(Sequence* seq) {
  if (seq->status == SequenceStatus::kRunning) {
    RemoveRunning(seq);
  } else {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
    manager_->DropSwapped(seq->id);  // a preempted one may have kept a block
  }
}

void Scheduler::FinishSequence(Sequence* seq) {
  Remove(seq);
  seq->status = SequenceStatus::kFinished;
  Release(seq, nullptr);
  Erase(seq);
}

void Scheduler::Preempt(Sequence* victim, StepPlan* plan) {
  RemoveRunning(victim, /*preempted=*/true);
  auto scheduled = std::find_if(step_.begin(), step_.end(),
                                [victim](const auto& entry) { return entry.first == victim; });
  if (scheduled != step_.end()) {
    budget_ += scheduled->second;
    step_.erase(scheduled);
  }
  victim->status = SequenceStatus::kWaiting;
  victim->waiting_since = absl::InfinitePast();  // the next Schedule starts its clock
  victim->num_computed_tokens = 0;
  Release(victim, plan);
  waiting_.push_front(victim);
  ++num_preemptions_;
  ++victim->request->num_preemptions;
  if (observer_ != nullptr) observer_->OnPreemption();
}

bool Scheduler::AllocateOrPreempt(Sequence* seq, int32_t num_tokens, StepPlan* plan) {
  while (true) {
    absl::Status status = manager_->AllocateSlots(seq->id, num_tokens);
    if (status.ok()) return true;
    Sequence* victim = running_.back();
    if (victim == seq) {
      if (running_.size() == 1) {
        stalled_.push_back(seq);  // alone and still no room: it can never grow
      } else {
        Preempt(seq, plan);
      }
      return false;
    }
    Preempt(victim, plan);
  }
}

bool Scheduler::TryAdmit(Sequence* seq, absl::Time now) {
  RequestState* request = seq->request;
  // A sequence still owing prompt logprobs computes every prompt position: cached K/V have no
  // logits. Once they are all in (a preempted sequence readmitted), it scores no more.
  if (seq->sampling.prompt_logprobs >= 0 && request->prompt_scores_complete()) {
    seq->sampling.prompt_logprobs = -1;
  }
  const bool scores_prompt = seq->sampling.prompt_logprobs >= 0;
  absl::StatusOr<SequenceStart> start = manager_->AddSequence(
      seq->id, seq->tokens, request->request.cache_salt, budget_, !scores_prompt);
  if (!start.ok()) return false;  // RESOURCE_EXHAUSTED: wait for blocks (FCFS)
  if (!request->cached_prompt_tokens_known) {
    request->cached_prompt_tokens = std::min<int32_t>(
        start->num_cached_tokens, static_cast<int32_t>(request->request.prompt_token_ids.size()));
    request->cached_prompt_tokens_known = true;
  }
  if (!request->first_scheduled_time.has_value()) request->first_scheduled_time = now;
  if (observer_ != nullptr) {
    observer_->OnPrefixCacheQuery(static_cast<int64_t>(seq->tokens.size()),
                                  start->num_cached_tokens - start->num_swapped_tokens,
                                  start->num_host_tokens);
  }
  seq->num_computed_tokens = start->num_cached_tokens;
  request->num_computed_context_tokens = seq->num_computed_tokens;
  seq->status = SequenceStatus::kRunning;
  seq->admit_order = next_admit_order_++;
  running_.push_back(seq);
  running_weight_ += Weight(*seq);
  if (config_.defer_host_loads && !step_.empty() &&
      (start->num_host_tokens > 0 || start->num_swapped_tokens > 0)) {
    return true;  // its slots are reserved; it computes from the next step on
  }
  step_.emplace_back(seq, start->num_new_tokens);
  budget_ -= start->num_new_tokens;
  return true;
}

StepPlan Scheduler::Schedule(absl::Time now) {
  StepPlan plan;
  plan.step_id = next_step_id_++;
  plan.released = std::move(pending_release_);
  pending_release_.clear();
  plan.block_copies = std::move(pending_copies_);
  pending_copies_.clear();
  step_.clear();
  budget_ = config_.max_num_batched_tokens;
  const int64_t preemptions_before = num_preemptions_;

  // The queue-wait clock of sequences queued since the last plan starts now.
  for (Sequence* seq : waiting_) {
    if (seq->waiting_since == absl::InfinitePast()) seq->waiting_since = now;
  }
  // Running sequences: decodes first, then unfinished prefills, oldest admission first.
  for (bool decodes : {true, false}) {
    if (!decodes && !step_.empty()) {  // step_ holds the decodes
      budget_ = std::min(budget_, PrefillCap(static_cast<int32_t>(step_.size()), now));
    }
    if (!decodes && step_time_bound_ > absl::ZeroDuration() && paced_prompt_tokens_ > 0) {
      budget_ = std::min(budget_, paced_prompt_tokens_);
    }
    for (size_t i = 0; i < running_.size() && budget_ > 0; ++i) {
      Sequence* seq = running_[i];
      const int32_t need = seq->num_uncomputed();
      if ((need == 1) != decodes || need <= 0) continue;
      const int32_t num_tokens = std::min(need, budget_);
      if (AllocateOrPreempt(seq, num_tokens, &plan)) {
        step_.emplace_back(seq, num_tokens);
        budget_ -= num_tokens;
      }
    }
  }
  // Waiting sequences, unless this step had to preempt (no room to spare).
  if (num_preemptions_ == preemptions_before) {
    // Front first; one that awaits a shared prefix keeps its place, and those behind it go on.
    for (auto it = waiting_.begin(); it != waiting_.end() && budget_ > 0;) {
      Sequence* seq = *it;
      if (running_weight_ + Weight(*seq) > config_.max_num_seqs) break;
      if (AwaitsSharedPrefix(*seq)) {
        ++it;
        continue;
      }
      if (!TryAdmit(seq, now)) break;
      it = waiting_.erase(it);
    }
  }
  for (const auto& [seq, num_tokens] : step_) AddToPlan(seq, num_tokens, &plan);
  step_.clear();
  // Every allocation above, and those of the last Update (forks), may have evicted blocks to
  // the host tier; admissions may have hit it.
  manager_->TakeHostCopies(&plan.host_copies);
  return plan;
}

int32_t Scheduler::PrefillCap(int32_t num_decodes, absl::Time now) const {
  if (QueueLiftsCap(num_decodes, now)) return config_.max_num_batched_tokens;
  int32_t cap = config_.max_prefill_tokens_per_step > 0 ? config_.max_prefill_tokens_per_step
                                                        : config_.max_num_batched_tokens;
  double target_ms = config_.step_time_target_ms;
  if (target_ms == kAutoStepTimeTarget) {
    const std::optional<double> decode_ms = step_time_.DecodeStepMs(num_decodes);
    target_ms = decode_ms.has_value() ? std::max(SchedulerConfig::kAutoStepTimeRatio * *decode_ms,
                                                 SchedulerConfig::kAutoStepTimeFloorMs)
                                      : 0;
  }
  if (target_ms > 0) {
    const std::optional<int32_t> within =
        step_time_.PromptTokensWithin(target_ms, num_decodes, manager_->block_size());
    if (within.has_value()) cap = std::min(cap, *within);
  }
  return cap;
}

bool Scheduler::QueueLiftsCap(int32_t num_decodes, absl::Time now) const {
  // Only sequences that could be admitted now count (the seats max_num_seqs leaves).
  const int32_t seats = config_.max_num_seqs - running_weight_;
  int32_t waiting = 0;
  for (const Sequence* seq : waiting_) {
    if (waiting >= seats) break;
    if (config_.max_queue_wait > absl::ZeroDuration() &&
        now - seq->waiting_since >= config_.max_queue_wait) {
      return true;
    }
    waiting += Weight(*seq);
  }
  return std::min(waiting, seats) > num_decodes;
}

bool Scheduler::AwaitsSharedPrefix(const Sequence& seq) const {
  if (seq.sampling.prompt_logprobs >= 0) return false;  // computes its whole prompt anyway
  const int32_t block_size = manager_->block_size();
  // The last token is always computed (its logits are sampled), so at most len - 1 are shared.
  const size_t shareable = seq.tokens.size() - 1;
  const std::string& salt = seq.request->request.cache_salt;
  for (const Sequence* other : running_) {
    if (other->num_uncomputed() <= 1 || other->request->request.cache_salt != salt) continue;
    const size_t limit = std::min(shareable, other->tokens.size());
    size_t common = 0;
    while (common < limit && seq.tokens[common] == other->tokens[common]) ++common;
    const int32_t full_blocks = static_cast<int32_t>(common) / block_size * block_size;
    if (full_blocks > other->num_computed_tokens) return true;
  }
  return false;
}

void Scheduler::OnStepDone(int32_t decode_tokens, int32_t prompt_tokens, absl::Duration duration) {
  if (config_.step_time_target_ms != 0) {
    step_time_.Observe(decode_tokens, prompt_tokens, absl::ToDoubleMilliseconds(duration));
  }
  if (step_time_bound_ <= absl::ZeroDuration() || prompt_tokens == 0) return;
  // Aim the next step at half the bound: a prompt token costs a little more with each chunk
  // (its attention reads a longer context), and a busy machine runs steps slower than the last.
  const double fits =
      static_cast<double>(prompt_tokens) *
      absl::FDivDuration(step_time_bound_ / 2, std::max(duration, absl::Microseconds(1)));
  const int32_t previous =
      paced_prompt_tokens_ > 0 ? paced_prompt_tokens_ : config_.max_num_batched_tokens;
  // Grows at most 2x a step (one short step says little), shrinks at once.
  const double next =
      std::min({fits, 2.0 * previous, static_cast<double>(config_.max_num_batched_tokens)});
  paced_prompt_tokens_ = std::max(manager_->block_size(), static_cast<int32_t>(next));
}

void Scheduler::SetStepTimeBound(absl::Duration bound) { step_time_bound_ = bound; }

void Scheduler::AddToPlan(Sequence* seq, int32_t num_tokens, StepPlan* plan) {
  ScheduledSequence& entry = plan->sequences.emplace_back();
  entry.id = seq->id;
  entry.num_scheduled_tokens = num_tokens;
  entry.sample = !seq->is_prefix() &&
                 seq->num_computed_tokens + num_tokens == static_cast<int32_t>(seq->tokens.size());
  absl::Span<const BlockId> table = *manager_->GetBlockTable(seq->id);
  if (!seq->runner_knows) {
    entry.is_new = true;
    entry.token_ids = seq->tokens;
    entry.block_ids.assign(table.begin(), table.end());
    entry.num_computed_tokens = seq->num_computed_tokens;
    entry.sampling = seq->sampling;
    seq->runner_knows = true;
  } else {
    entry.token_ids.assign(seq->tokens.begin() + seq->runner_num_tokens, seq->tokens.end());
    entry.block_ids.assign(table.begin() + seq->runner_num_blocks, table.end());
  }
  seq->runner_num_tokens = static_cast<int32_t>(seq->tokens.size());
  seq->runner_num_blocks = static_cast<int32_t>(table.size());
}

void Scheduler::CountAttention(const StepPlan& plan, StepMetrics* metrics) const {
  for (const ScheduledSequence& entry : plan.sequences) {
    auto it = sequences_.find(entry.id);
    if (it == sequences_.end()) continue;
    const int64_t context = it->second->num_computed_tokens + entry.num_scheduled_tokens;
    if (IsDecode(entry)) {
      metrics->num_decode_context_tokens += context;
    } else {
      metrics->num_prefill_attended_tokens += entry.num_scheduled_tokens * context;
    }
  }
}

absl::StatusOr<std::vector<SequenceToken>> Scheduler::Update(const StepPlan& plan,
                                                             const StepResult& result) {
  std::vector<SequenceToken> tokens;
  size_t next_sampled = 0;
  size_t next_scores = 0;
  for (const ScheduledSequence& entry : plan.sequences) {
    auto it = sequences_.find(entry.id);
    if (it == sequences_.end()) {
      return absl::InternalError(absl::StrCat("Update: unknown sequence ", entry.id));
    }
    Sequence* seq = it->second.get();
    if (next_scores < result.prompt_logprobs.size() &&
        result.prompt_logprobs[next_scores].id == seq->id) {
      KVSERVE_RETURN_IF_ERROR(AddPromptScores(result.prompt_logprobs[next_scores++], seq->request));
    }
    absl::Status status = manager_->CommitComputed(seq->id, entry.num_scheduled_tokens);
    if (!status.ok()) return status;
    seq->num_computed_tokens += entry.num_scheduled_tokens;
    seq->request->num_computed_context_tokens = seq->num_computed_tokens;
    if (entry.sample) {
      if (next_sampled >= result.sampled.size() || result.sampled[next_sampled].id != seq->id) {
        return absl::InternalError(absl::StrCat("Update: no sampled token for sequence ", seq->id));
      }
      const SampledToken& sampled = result.sampled[next_sampled++];
      seq->tokens.push_back(sampled.token);
      status = manager_->AppendTokens(seq->id, {&sampled.token, 1});
      if (!status.ok()) return status;
      tokens.push_back({seq, &sampled});
    }
    if (seq->is_prefix() && seq->num_uncomputed() == 0) ForkPrefix(seq);
  }
  if (next_sampled != result.sampled.size()) {
    return absl::InternalError("Update: the runner sampled more sequences than planned");
  }
  if (next_scores != result.prompt_logprobs.size()) {
    return absl::InternalError(
        "Update: prompt logprobs of a sequence not planned, or out of order");
  }
  return tokens;
}

absl::Status Scheduler::AddPromptScores(const PromptScores& scores, RequestState* request) {
  // A chunk recomputed after a preemption repeats scores the request has: keep the first.
  const size_t next = request->prompt_scores.size() + 1;  // the prompt token scored next
  const size_t first = static_cast<size_t>(scores.first_token);
  if (first > next) {
    return absl::InternalError(absl::StrCat("prompt logprobs of sequence ", scores.id,
                                            " start at token ", first, ", expected ", next));
  }
  for (size_t i = next - first; i < scores.scores.size(); ++i) {
    request->prompt_scores.push_back(scores.scores[i]);
  }
  return absl::OkStatus();
}

void Scheduler::ForkPrefix(Sequence* prefix) {
  RequestState* request = prefix->request;
  const std::vector<TokenId>& prompt = request->request.prompt_token_ids;
  const int32_t shared_len = prefix->num_computed_tokens;
  std::vector<Sequence*> children;
  for (size_t c = 0; c < request->choices.size(); ++c) {
    std::vector<TokenId> tokens = prompt;
    const std::vector<int32_t>& generated = request->choices[c]->generated();
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    Sequence* child = NewSequence(request, static_cast<int32_t>(c), std::move(tokens));
    absl::StatusOr<std::optional<BlockCopy>> copy = manager_->ForkSequence(prefix->id, child->id);
    if (!copy.ok()) {
      waiting_.push_front(child);  // recomputed from the prefix cache when admitted
      continue;
    }
    if (copy->has_value()) pending_copies_.push_back(**copy);
    manager_->AppendTokens(child->id, absl::MakeConstSpan(child->tokens).subspan(shared_len))
        .IgnoreError();  // known sequence, known tokens: cannot fail
    child->num_computed_tokens = shared_len;
    child->status = SequenceStatus::kRunning;
    child->admit_order = prefix->admit_order;
    children.push_back(child);
  }
  // The children take the prefix's place in admission order (and its weight).
  auto it = std::find(running_.begin(), running_.end(), prefix);
  it = running_.erase(it);
  running_weight_ -= Weight(*prefix);
  running_.insert(it, children.begin(), children.end());
  running_weight_ += static_cast<int32_t>(children.size());
  manager_->FreeSequence(prefix->id).IgnoreError();
  prefix->status = SequenceStatus::kFinished;
  Release(prefix, nullptr);
  Erase(prefix);
}

std::vector<Sequence*> Scheduler::TakeStalled() {
  std::vector<Sequence*> stalled = std::move(stalled_);
  stalled_.clear();
  return stalled;
}

int32_t Scheduler::num_running_requests() const {
  absl::flat_hash_set<const RequestState*> requests;
  for (const Sequence* seq : running_) requests.insert(seq->request);
  return static_cast<int32_t>(requests.size());
}

int32_t Scheduler::num_waiting_requests() const {
  absl::flat_hash_set<const RequestState*> running;
  for (const Sequence* seq : running_) running.insert(seq->request);
  absl::flat_hash_set<const RequestState*> waiting;
  for (const Sequence* seq : waiting_) {
    if (!running.contains(seq->request)) waiting.insert(seq->request);
  }
  return static_cast<int32_t>(waiting.size());
}

}  // namespace kvserve
