// OpenAI request JSON -> kvserve.v1 requests: the parsing half of the OpenAI-compatible API.
//
// The parser checks JSON syntax and each field's JSON type and refuses what kvserve does not
// do (best_of > n, suffix, logit_bias, echo on chat, echo or prompt_logprobs with stream) with
// INVALID_ARGUMENT "<field>: ..." naming the OpenAI field. Value ranges are NOT checked here:
// they are the validation library's (api/request_validation.h), which the backend applies to
// the GenerateRequest exactly as for gRPC, so both APIs answer a rule the same way.
//
// Field mapping (docs/api.md has the table): prompt (string, list of strings, token ids, list
// of token-id lists; one GenerateRequest per prompt), messages (content: string or text parts),
// max_tokens / max_completion_tokens, temperature, top_p, top_k (-1: off), min_p, n, stop
// (string or list), stop_token_ids, seed, presence / frequency / repetition penalties,
// logprobs (completions: int; chat: bool + top_logprobs), prompt_logprobs, echo (completions;
// with max_tokens 0: the prompt alone), ignore_eos, include_stop_str_in_output,
// skip_special_tokens, add_special_tokens, add_generation_prompt, user (accepted, unused),
// priority, stream, stream_options.include_usage. Unknown fields are ignored, as OpenAI does.
// /v1/completions without max_tokens generates 16 tokens (OpenAI's default); chat without it
// runs to the end of the context.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_HTTP_OPENAI_MAPPING_H_
#define KVSERVE_HTTP_OPENAI_MAPPING_H_

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kvserve/v1/generation.pb.h"
#include "tokenizer/tool_call_parser.h"

namespace kvserve {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

// A parsed /v1/completions or /v1/chat/completions request.
struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string model;  // as the client wrote it ("" when omitted); responses echo it
  // One per prompt (several for a batch of prompts); `model` already resolved through the
  // aliases. Choice i of prompt p is choice p * n + i in the response.
  std::vector<kvserve::v1::GenerateRequest> requests;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // return logprobs
  int32_t top_logprobs = 0;    // alternatives per position
  // echo (completions, not streamed): each choice's text (and logprobs) starts with its prompt's;
  // the prompt's logprobs come from SamplingParams.prompt_logprobs, which echo sets.
  bool echo = false;
  // echo with max_tokens 0 (OpenAI's legacy scoring call): the prompt alone. One token is
  // generated (the proto's max_tokens 0 means "default") and left out of text, logprobs and usage.
  bool prompt_only = false;
  // vLLM's prompt_logprobs (not streamed): returned as prompt_logprobs with this many
  // alternatives per position; -1: not asked.
  int32_t prompt_logprobs = -1;
  // Chat with tools and tool_choice "auto": the output is parsed for tool calls in
  // tool_call_format (message.tool_calls, finish_reason "tool_calls"); at most one call unless
  // parallel_tool_calls.
  bool parse_tool_calls = false;
  bool parallel_tool_calls = true;
  // tool_choice a named function: the output is its arguments (constrained to its parameters).
  std::string forced_tool;
  // tool_choice "required": the output is a JSON list of {name, parameters} (constrained).
  bool tool_calls_required = false;
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;
  std::string system_fingerprint;  // the responses' system_fingerprint (options')
};

struct OpenAiMappingOptions {
  std::string served_model;          // the canonical name (ModelInfo.name)
  std::vector<std::string> aliases;  // other names accepted for it
  int32_t default_completion_max_tokens = 16;
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;  // ModelInfo.tool_call_format
  std::string system_fingerprint;  // SystemFingerprint(ModelInfo) (api/serving_fingerprint.h)
  // ModelInfo.limits: max_tokens and n are checked here, in [1, limit] (OpenAI has no 0 for
  // "default"), with the validation library's rule and words (CheckCountRange).
  int32_t max_tokens = std::numeric_limits<int32_t>::max();
  int32_t max_n = std::numeric_limits<int32_t>::max();
};

// The name put in GenerateRequest.model: the served model for an alias, `model` otherwise.
std::string ResolveModelName(absl::string_view model, const OpenAiMappingOptions& options);

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body,
                                                 const OpenAiMappingOptions& options);

// vLLM's /tokenize ({model, prompt | messages, add_special_tokens, add_generation_prompt}) and
// /detokenize ({model, tokens}).
absl::StatusOr<kvserve::v1::TokenizeRequest> ParseTokenizeRequest(
    absl::string_view body, const OpenAiMappingOptions& options);
absl::StatusOr<kvserve::v1::DetokenizeRequest> ParseDetokenizeRequest(
    absl::string_view body, const OpenAiMappingOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_HTTP_OPENAI_MAPPING_H_
