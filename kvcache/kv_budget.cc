#include "kvcache/kv_budget.h"

#include <algorithm>

namespace kvserve {

KvBudget KvBudgetFor(int64_t prompt_tokens, int64_t max_tokens, int32_t n, int64_t context_length,
                     int32_t block_size) {
  int64_t output = max_tokens;
  if (context_length > 0) {
    const int64_t to_context = context_length - prompt_tokens;
    output = max_tokens > 0 ? std::min(max_tokens, to_context) : to_context;
  }
  output = std::max<int64_t>(output, 1);
  const int64_t shared = prompt_tokens / block_size;
  const int64_t per_choice = (prompt_tokens + output + block_size - 1) / block_size - shared;
  return KvBudget{.output_tokens = output, .blocks = shared + std::max<int64_t>(n, 1) * per_choice};
}

}  // namespace kvserve
