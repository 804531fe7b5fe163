// The KV budget of one request: how many blocks it holds at most when every choice runs to its
// end. This is the one KV-fit rule of kvserve: the worker's admission check (ValidateKvFit), the
// engine's Submit and the router's routing cost all call it, so a request that one of them
// accepts is never refused by another for its size.
//
//   output   = min(max_tokens, context_length - prompt_tokens)   (max_tokens 0: to the end of
//              the context), at least 1: one choice never outgrows the context window
//   shared   = floor(prompt_tokens / block_size)   the prompt's full blocks, shared by all choices
//   per choice = ceil((prompt_tokens + output) / block_size) - shared
//   blocks   = shared + max(n, 1) * per choice
//
// context_length <= 0 means "no cap" (the router's books use it when they do not know one).
// `prompt_tokens` is the whole context a choice starts from: on a migration with one choice, the
// prompt plus the tokens it already generated, with `max_tokens` what is left to generate.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_KVCACHE_KV_BUDGET_H_
#define KVSERVE_KVCACHE_KV_BUDGET_H_

#include <cstdint>

namespace kvserve {

struct KvBudget {
  int64_t output_tokens = 0;  // per choice, after the context cap
  int64_t blocks = 0;         // the whole request, all choices
};

// REQUIRES: block_size > 0, prompt_tokens >= 0, max_tokens >= 0.
KvBudget KvBudgetFor(int64_t prompt_tokens, int64_t max_tokens, int32_t n, int64_t context_length,
                     int32_t block_size);

}  // namespace kvserve

#endif  // KVSERVE_KVCACHE_KV_BUDGET_H_
