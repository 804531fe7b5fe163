#include "router/request_progress.h"

#include <algorithm>

namespace kvserve {

namespace v1 = kvserve::v1;

RequestProgress::RequestProgress(const ProxiedRequest* request)
    : request_(request), choices_(std::max(1, request->sampling.n())) {}

RouteRequest RequestProgress::RouteFor(const std::vector<std::string>& excluded) const {
  RouteRequest route;
  route.request_id = request_->router_request_id;
  route.tokens = request_->prompt_token_ids;
  route.context_length = request_->context_length;
  // The KV budget as kvcache/kv_budget.h counts it. With one choice its generated tokens are part
  // of the context to prefill (and of the prefix a worker may have cached) and only the rest is
  // still to generate; with several, only the shared prompt is, and each unfinished choice can
  // still reach prompt + max_tokens.
  if (choices_.size() == 1) {
    route.tokens.insert(route.tokens.end(), choices_[0].token_ids.begin(),
                        choices_[0].token_ids.end());
    route.max_tokens = std::max<int64_t>(
        1, request_->sampling.max_tokens() - static_cast<int64_t>(choices_[0].token_ids.size()));
    route.num_choices = 1;
  } else {
    route.max_tokens = std::max<int64_t>(request_->sampling.max_tokens(), 1);
    route.num_choices = static_cast<int32_t>(
        std::max<int64_t>(1, std::count_if(choices_.begin(), choices_.end(),
                                           [](const Choice& choice) { return !choice.finished; })));
  }
  route.cache_salt = request_->cache_salt;
  route.excluded_workers = excluded;
  route.prefer_longest_prefix = !excluded.empty();
  return route;
}

v1::WorkerGenerateRequest RequestProgress::WorkerRequest(const RoutingDecision& decision) const {
  v1::WorkerGenerateRequest call;
  call.set_request_id(request_->router_request_id);
  call.mutable_prompt_token_ids()->Add(request_->prompt_token_ids.begin(),
                                       request_->prompt_token_ids.end());
  *call.mutable_sampling() = request_->sampling;
  if (prompt_logprobs_sent_) call.mutable_sampling()->clear_prompt_logprobs();
  call.set_cache_salt(request_->cache_salt);
  if (!decision.transfer_source.empty()) {
    v1::KvSource* source = call.mutable_kv_source();
    source->set_address(decision.transfer_source);
    source->set_num_blocks(static_cast<int32_t>(decision.transfer_source_blocks));
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (choices_[i].finished) continue;
    v1::WorkerChoice* choice = call.add_choices();
    choice->set_index(static_cast<int32_t>(i));
    choice->mutable_generated_token_ids()->Add(choices_[i].token_ids.begin(),
                                               choices_[i].token_ids.end());
    choice->set_emitted_text_bytes(choices_[i].text_bytes);
  }
  return call;
}

RequestProgress::MessageKind RequestProgress::Apply(v1::GenerateResponse* response) {
  if (response->has_prefill_progress() && response->choices_size() == 0 &&
      !response->has_usage() && response->prompt_logprobs_size() == 0) {
    return MessageKind::kProgress;
  }
  const int n = static_cast<int>(choices_.size());
  if (response->prompt_logprobs_size() > 0) {
    if (prompt_logprobs_sent_) response->clear_prompt_logprobs();
    prompt_logprobs_sent_ = true;
  }
  for (const v1::ChoiceDelta& delta : response->choices()) {
    if (delta.index() < 0 || delta.index() >= n) continue;
    Choice& choice = choices_[delta.index()];
    choice.token_ids.insert(choice.token_ids.end(), delta.token_ids().begin(),
                            delta.token_ids().end());
    choice.text_bytes += static_cast<int64_t>(delta.text().size());
    completion_tokens_ += delta.token_ids_size();
    if (delta.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) choice.finished = true;
  }
  response->clear_prefill_progress();  // a worker-internal field, whatever came with it
  response->set_request_id(request_->client_request_id);
  if (!response->has_usage()) return MessageKind::kOutput;
  const int32_t prompt_tokens = static_cast<int32_t>(request_->prompt_token_ids.size());
  // The worker that finished the request counts the prompt tokens it found cached.
  const int32_t cached = std::min(response->usage().cached_prompt_tokens(), prompt_tokens);
  v1::Usage* usage = response->mutable_usage();
  usage->set_prompt_tokens(prompt_tokens);
  usage->set_completion_tokens(completion_tokens_);
  usage->set_cached_prompt_tokens(cached);
  return MessageKind::kLast;
}

bool RequestProgress::all_finished() const {
  return std::all_of(choices_.begin(), choices_.end(),
                     [](const Choice& choice) { return choice.finished; });
}

std::optional<v1::GenerateResponse> RequestProgress::UsageOnlyEnding() const {
  if (!all_finished() || completion_tokens_ == 0) return std::nullopt;
  v1::GenerateResponse last;
  last.set_request_id(request_->client_request_id);
  v1::Usage* usage = last.mutable_usage();
  usage->set_prompt_tokens(static_cast<int32_t>(request_->prompt_token_ids.size()));
  usage->set_completion_tokens(completion_tokens_);
  return last;
}

}  // namespace kvserve
