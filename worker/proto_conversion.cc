#include "worker/proto_conversion.h"

#include <algorithm>

#include "absl/random/random.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

void ToProto(const TokenLogprobOutput& token, v1::TokenLogprob* proto) {
  proto->set_token_id(token.token_id);
  proto->set_token_bytes(token.token_bytes);
  proto->set_logprob(token.logprob);
  proto->set_rank(token.rank);
}

void ToProto(const PositionLogprobsOutput& position, v1::PositionLogprobs* proto) {
  ToProto(position.chosen, proto->mutable_chosen());
  for (const TokenLogprobOutput& top : position.top) ToProto(top, proto->add_top());
}

}  // namespace

int32_t ResolveN(const v1::SamplingParams& sampling) { return std::max(sampling.n(), 1); }

SamplingOptions ResolveSampling(const v1::SamplingParams& sampling, const ServingLimits& limits) {
  SamplingOptions options;
  options.temperature = sampling.has_temperature() ? sampling.temperature() : 1.0f;
  options.top_k = sampling.top_k();
  options.top_p = sampling.has_top_p() ? sampling.top_p() : 1.0f;
  options.min_p = sampling.min_p();
  options.repetition_penalty =
      sampling.has_repetition_penalty() ? sampling.repetition_penalty() : 1.0f;
  options.presence_penalty = sampling.presence_penalty();
  options.frequency_penalty = sampling.frequency_penalty();
  if (sampling.has_seed()) {
    options.seed = sampling.seed();
  } else {
    thread_local absl::BitGen bitgen;
    options.seed = absl::Uniform<uint64_t>(bitgen);
  }
  options.max_tokens =
      sampling.max_tokens() > 0 ? sampling.max_tokens() : limits.default_max_tokens;
  options.stop.assign(sampling.stop().begin(), sampling.stop().end());
  options.stop_token_ids.assign(sampling.stop_token_ids().begin(), sampling.stop_token_ids().end());
  options.ignore_eos = sampling.ignore_eos();
  options.include_stop_str_in_output = sampling.include_stop_str_in_output();
  if (sampling.has_logprobs()) options.logprobs = sampling.logprobs();
  if (sampling.has_prompt_logprobs()) options.prompt_logprobs = sampling.prompt_logprobs();
  options.detokenize_special_tokens = sampling.detokenize_special_tokens();
  return options;
}

Constraint ConstraintOf(const v1::SamplingParams& sampling) {
  Constraint constraint;
  if (!sampling.has_structured_output()) return constraint;
  const v1::StructuredOutput& output = sampling.structured_output();
  switch (output.kind_case()) {
    case v1::StructuredOutput::kJsonObject:
      constraint.kind = Constraint::kJsonObject;
      break;
    case v1::StructuredOutput::kJsonSchema:
      constraint.kind = Constraint::kJsonSchema;
      constraint.spec = output.json_schema();
      break;
    case v1::StructuredOutput::kRegex:
      constraint.kind = Constraint::kRegex;
      constraint.spec = output.regex();
      break;
    case v1::StructuredOutput::kChoice:
      constraint.kind = Constraint::kChoice;
      constraint.choices.assign(output.choice().choices().begin(), output.choice().choices().end());
      break;
    case v1::StructuredOutput::kGrammar:
      constraint.kind = Constraint::kGrammar;
      constraint.spec = output.grammar();
      break;
    case v1::StructuredOutput::KIND_NOT_SET:
      break;
  }
  return constraint;
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return v1::FINISH_REASON_UNSPECIFIED;
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
      return v1::FINISH_REASON_ABORT;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

void ToProto(const EngineOutput& output, const std::string& request_id,
             v1::GenerateResponse* response) {
  response->set_request_id(request_id);
  if (output.prompt_logprobs.has_value()) {
    for (const PositionLogprobsOutput& position : *output.prompt_logprobs) {
      ToProto(position, response->add_prompt_logprobs());
    }
  }
  for (const ChoiceOutput& choice : output.choices) {
    v1::ChoiceDelta* delta = response->add_choices();
    delta->set_index(choice.index);
    delta->mutable_token_ids()->Add(choice.token_ids.begin(), choice.token_ids.end());
    delta->set_text(choice.text);
    for (const PositionLogprobsOutput& position : choice.logprobs) {
      ToProto(position, delta->add_logprobs());
    }
    delta->set_finish_reason(ToProto(choice.finish_reason));
    if (choice.stop_string.has_value()) delta->set_stop_string(*choice.stop_string);
    if (choice.stop_token_id.has_value()) delta->set_stop_token_id(*choice.stop_token_id);
  }
  if (output.usage.has_value()) {
    v1::Usage* usage = response->mutable_usage();
    usage->set_prompt_tokens(output.usage->prompt_tokens);
    usage->set_completion_tokens(output.usage->completion_tokens);
    usage->set_cached_prompt_tokens(output.usage->cached_prompt_tokens);
  }
  if (output.prefill_computed_tokens.has_value()) {
    response->mutable_prefill_progress()->set_computed_tokens(*output.prefill_computed_tokens);
  }
}

void ToProto(const EngineStats& stats, v1::Capacity* capacity) {
  capacity->set_block_size(stats.block_size);
  capacity->set_total_blocks(stats.total_blocks);
  capacity->set_free_blocks(stats.free_blocks);
  capacity->set_evictable_blocks(stats.evictable_blocks);
  capacity->set_host_blocks(stats.host_blocks);
  capacity->set_host_cached_blocks(stats.host_cached_blocks);
  capacity->set_used_blocks(stats.used_blocks);
  capacity->set_running_requests(stats.running_requests);
  capacity->set_waiting_requests(stats.waiting_requests);
  capacity->set_max_waiting_requests(stats.max_waiting_requests);
}

}  // namespace kvserve
