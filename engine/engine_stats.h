// EngineStats: a snapshot of the engine's KV capacity and queues, for Worker.StreamStatus, the
// metrics layer and tests. Plain values.
#ifndef KVSERVE_ENGINE_ENGINE_STATS_H_
#define KVSERVE_ENGINE_ENGINE_STATS_H_

#include <cstdint>

namespace kvserve {

struct EngineStats {
  int32_t block_size = 0;
  uint64_t epoch = 0;  // the KV cache manager's event epoch
  // KV capacity in blocks (kvcache/kv_cache_manager.h KvCacheStats): total = free + used.
  int64_t total_blocks = 0;
  int64_t free_blocks = 0;
  int64_t evictable_blocks = 0;  // free and still holding a cached prefix
  int64_t used_blocks = 0;
  int64_t cached_blocks = 0;  // in the prefix-cache index, used or free
  // The host tier (0 when there is none): its size, the blocks it holds, copies so far.
  int64_t host_blocks = 0;
  int64_t host_cached_blocks = 0;
  int64_t host_stored_blocks = 0;  // device -> host, since start
  int64_t host_loaded_blocks = 0;  // host -> device, since start
  // Requests (not choices).
  int32_t running_requests = 0;  // at least one sequence holds blocks
  int32_t waiting_requests = 0;  // submitted, nothing running yet (or fully preempted)
  int32_t running_sequences = 0;
  int32_t max_waiting_requests = 0;    // the engine's waiting-queue limit (0: unknown)
  int64_t num_preemptions = 0;         // since start
  int64_t prefix_query_tokens = 0;     // since start
  int64_t prefix_hit_tokens = 0;       // since start, either tier
  int64_t prefix_host_hit_tokens = 0;  // of those, copied back from the host tier
  int64_t num_steps = 0;               // since start
  bool draining = false;
  bool failed = false;  // the runner failed in a step: no request runs any more
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_ENGINE_STATS_H_
