// Request validation at the API boundary: every check the kvserve.v1 protos promise, done on the
// proto messages before anything reaches the engine, so a bad request fails fast with a status
// whose message starts with the field path (the engine re-checks its own invariants).
// The router and the worker both call these functions (library kvserve_api), in the same
// order, so both answer a bad request with the same code and the same message; the router builds
// its ServingLimits from the ModelInfo the workers publish (ServingLimitsFromModelInfo).
//
//   INVALID_ARGUMENT    malformed input: "sampling.top_p: must be in (0, 1], got 0",
//                       "prompt_token_ids.ids[3]: token id 70000 is outside [0, 49152)", a
//                       prompt over limits.max_prompt_tokens, ...
//   RESOURCE_EXHAUSTED  a request that could never fit in the KV pool even alone
//                       (kvcache/kv_budget.h is the rule).
//   NOT_FOUND           `model` names a model this server does not serve.
//
// Which checks run where:
//   ValidateGenerateRequest / ValidateTokenizeRequest   the public request, before tokenizing;
//   ValidatePromptTokens                               the token ids after tokenizing (or as
//   given); ValidateKvFit                                      the resolved request against the
//   pool; ValidateWorkerGenerateRequest                      the router's request (already
//   tokenized).
//
// Thread-safety: pure functions of their arguments.
#ifndef KVSERVE_API_REQUEST_VALIDATION_H_
#define KVSERVE_API_REQUEST_VALIDATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/sampling.pb.h"
#include "kvserve/v1/worker.pb.h"
#include "tokenizer/unicode.h"  // IsValidUtf8

namespace kvserve {

// What the server accepts; the `limits` part is published as ModelInfo.limits.
struct ServingLimits {
  std::string model_name;  // ModelInfo.name; GenerateRequest.model must be empty or this
  std::vector<std::string> model_aliases;  // ModelInfo.aliases: accepted as model_name
  int32_t vocab_size = 0;
  int32_t model_context_length = 0;  // ModelInfo.context_length: the model's window
  int32_t context_length = 0;        // prompt + output tokens of one choice at most (pool-limited)
  int32_t max_prompt_tokens = 0;     // <= context_length - 1
  int32_t max_tokens = 0;            // SamplingParams.max_tokens at most
  int32_t default_max_tokens = 0;    // for max_tokens 0; 0: to the end of the context
  int32_t max_n = 8;
  int32_t max_logprobs = 20;
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 256;
  int32_t max_stop_token_ids = 64;
  int32_t max_chat_messages = 256;
  bool chat_supported = false;  // the model has a chat template we render
  int32_t kv_block_size = 16;
  int64_t kv_total_blocks = 0;  // usable blocks of the pool (null block excluded)
};

// The one rule and message for a count in a range: OK, or INVALID_ARGUMENT
// "<path>: must be in [min, max], got <value>". The gRPC API takes 0 for max_tokens and n (the
// default); the HTTP API, as OpenAI, starts them at 1: same rule, same words.
absl::Status CheckCountRange(absl::string_view path, int64_t value, int64_t min, int64_t max);

// The proto's limits message for ModelInfo.
kvserve::v1::GenerationLimits ToProtoLimits(const ServingLimits& limits);

// The limits a ModelInfo publishes (its `limits`, context lengths, vocabulary, block size, chat
// support), with kv_total_blocks = `kv_total_blocks`: what a router validates with.
ServingLimits ServingLimitsFromModelInfo(const kvserve::v1::ModelInfo& info,
                                         int64_t kv_total_blocks);

// SamplingParams ranges and limits; messages start with `path` (e.g. "sampling").
absl::Status ValidateSamplingParams(const kvserve::v1::SamplingParams& sampling,
                                    const ServingLimits& limits, absl::string_view path);

// Everything in a public GenerateRequest that can be checked before tokenizing: model, request
// id, exactly one input, chat roles, UTF-8 of every string, priority, sampling.
absl::Status ValidateGenerateRequest(const kvserve::v1::GenerateRequest& request,
                                     const ServingLimits& limits);
absl::Status ValidateTokenizeRequest(const kvserve::v1::TokenizeRequest& request,
                                     const ServingLimits& limits);
// Model name and every token id in the vocabulary.
absl::Status ValidateDetokenizeRequest(const kvserve::v1::DetokenizeRequest& request,
                                       const ServingLimits& limits);
// NOT_FOUND unless `model` is empty or the served model's name.
absl::Status ValidateModelName(absl::string_view model, const ServingLimits& limits);

// The prompt as token ids: not empty (INVALID_ARGUMENT "input: ..."), every id in the vocabulary
// (INVALID_ARGUMENT naming `path`[i]), at most max_prompt_tokens (RESOURCE_EXHAUSTED).
absl::Status ValidatePromptTokens(absl::Span<const int32_t> token_ids, const ServingLimits& limits,
                                  absl::string_view path);

// The KV blocks one request needs when every choice runs to its end (kvcache/kv_budget.h, with
// limits.context_length as the cap). RESOURCE_EXHAUSTED when that exceeds the pool
// (limits.kv_total_blocks), so it could never run even alone. max_tokens 0 means the default
// (to the end of the context).
absl::Status ValidateKvFit(int32_t num_prompt_tokens, int32_t max_tokens, int32_t n,
                           const ServingLimits& limits);

// The internal request (router -> worker): request id, prompt ids, choices, sampling.
absl::Status ValidateWorkerGenerateRequest(const kvserve::v1::WorkerGenerateRequest& request,
                                           const ServingLimits& limits);

// A worker's KV block fetch (worker -> worker): token ids present, first_block and max_blocks
// >= 0. Whether kv_format matches is the receiving worker's to say.
absl::Status ValidateFetchKvBlocksRequest(const kvserve::v1::FetchKvBlocksRequest& request);

}  // namespace kvserve

#endif  // KVSERVE_API_REQUEST_VALIDATION_H_
