// GenerateOffline: runs a set of requests to completion on an EngineCore on the calling thread,
// without gRPC: the serving engine (scheduler, KV cache manager, runner, output processing) is
// the same one kvserve-worker runs, so what kvserve-generate, the model benchmarks and the GPU
// checks measure is the path that serves.
//
// Thread-safety: drives `core` on the calling thread; the core must not be stepped elsewhere.
#ifndef KVSERVE_ENGINE_OFFLINE_GENERATE_H_
#define KVSERVE_ENGINE_OFFLINE_GENERATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/engine_core.h"
#include "engine/request.h"

namespace kvserve {

struct OfflineResult {
  std::vector<int32_t> token_ids;  // choice 0's generated tokens
  std::string text;                // choice 0's text
  FinishReason finish_reason = FinishReason::kNone;
};

struct OfflineStats {
  int64_t prompt_tokens = 0;     // over all requests
  int64_t generated_tokens = 0;  // over all requests and choices
  int64_t steps = 0;
  double prefill_seconds = 0;  // submit -> every request has its first token
  double decode_seconds = 0;   // first tokens -> the last token
};

// Submits every request (ids must be unique), steps the core until it has no work, and fills
// results[i] for requests[i]. on_output(i, output), when given, sees each message of request i
// as it arrives (for streaming text). INVALID_ARGUMENT etc. when a request does not validate;
// a step's error as the runner gave it; INTERNAL when a stream ends with an error.
absl::StatusOr<OfflineStats> GenerateOffline(
    EngineCore& core, std::vector<EngineRequest> requests, std::vector<OfflineResult>* results,
    const std::function<void(size_t, const EngineOutput&)>& on_output = {});

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_OFFLINE_GENERATE_H_
