// EngineRequest: one generation request as the engine takes it, already tokenized and resolved
// (the service layer maps kvserve.v1.WorkerGenerateRequest onto it and validates the ranges the
// proto states; the engine checks again and validates what only it knows, see engine.h).
//
// A request has one or more choices (SamplingParams.n). Each choice is an independent completion
// of the same prompt; choices share the prompt's full KV blocks (forked after its prefill). A
// migrated request carries, per unfinished choice, the tokens it already generated and the text
// bytes the client already received: the engine continues each choice exactly where it stopped
// (the RNG counter is the choice's token index, penalties and stop strings see those tokens).
//
// Thread-safety: plain values.
#ifndef KVSERVE_ENGINE_REQUEST_H_
#define KVSERVE_ENGINE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvserve {

class CompiledConstraint;  // grammar/compiled_constraint.h

// Sampling and stopping, with the meaning of kvserve.v1.SamplingParams after defaults were
// applied (no "unset" here: every field holds the value to use).
struct SamplingOptions {
  float temperature = 1.0f;         // 0 (or < 1e-5): greedy
  int32_t top_k = 0;                // <= 0: no top-k
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  uint64_t seed = 0;                // choice c draws from ChoiceSeed(seed, c) at its token index

  // Per-choice total of generated tokens, including tokens generated before a migration.
  // 0: up to the end of the context window. Generation also stops (kLength) when prompt + output
  // reach the context window.
  int32_t max_tokens = 0;
  std::vector<std::string> stop;        // stop strings, non-empty each
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  std::optional<int32_t> logprobs;  // unset: none; 0: chosen only; k: chosen + top k
  // Logprobs of the prompt's tokens 1..P-1 (each under the logits of the position before it):
  // unset: none; 0: the prompt token's own only; k: its own + the top k. Computed in the
  // request's prefill, which then does not attach a cached prefix (docs/architecture.md).
  std::optional<int32_t> prompt_logprobs;
  bool detokenize_special_tokens = false;
  // Structured output: the compiled form the output must match (grammar/); null: free text.
  // The runner that samples keeps a matcher per choice and masks the logits with it.
  std::shared_ptr<const CompiledConstraint> constraint;
};

// Where one choice starts (kvserve.v1.WorkerChoice).
struct ChoiceStart {
  int32_t index = 0;                         // client-visible choice index, in [0, n)
  std::vector<int32_t> generated_token_ids;  // already generated and delivered
  int64_t emitted_text_bytes = 0;            // UTF-8 bytes of text already delivered
};

struct EngineRequest {
  // Unique among the engine's live requests (Submit refuses a duplicate with ALREADY_EXISTS);
  // Abort takes it.
  std::string request_id;
  // How logs name the request: the client's request id (X-Request-Id, or the router's for one it
  // proxies), the same in every line about it on router and worker. Empty: request_id.
  std::string log_id;
  std::vector<int32_t> prompt_token_ids;  // not empty, each in [0, vocab)
  std::string cache_salt;                 // prefix-cache salt; empty: shared cache
  SamplingOptions sampling;
  int32_t n = 1;  // the client's n; `choices` says which of 0..n-1 run here
  // The choices to run. Empty: every index 0..n-1, starting from nothing.
  std::vector<ChoiceStart> choices;
  int32_t priority = 0;  // informational for now (the engine is FCFS); [-100, 100]
  // While the request has no output (prefilling, or waiting in the queue), the engine pushes a
  // progress report (EngineOutput::prefill_computed_tokens) after a step once this long passed
  // since the request's previous message: at most one per step, none while tokens flow.
  // While such a request is live the scheduler paces prefills into steps within twice the
  // shortest interval (Scheduler::SetStepTimeBound). Zero: no reports (worker.proto
  // WorkerGenerateRequest.progress_interval_ms).
  absl::Duration progress_interval = absl::ZeroDuration();
};

// The seed choice `choice_index` draws from: the request seed for choice 0, a mix of both for
// the others, so choices differ but each is reproducible on any worker.
uint64_t ChoiceSeed(uint64_t seed, int32_t choice_index);

// INVALID_ARGUMENT naming the field ("sampling.top_p: ...") when a field is out of range or the
// choices are inconsistent (duplicate or out-of-range index). Checks only what needs no model.
absl::Status ValidateRequestFields(const EngineRequest& request);

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_REQUEST_H_
