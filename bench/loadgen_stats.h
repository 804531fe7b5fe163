// Statistics and reporting of kvserve-loadgen: percentiles of latency samples and the summary it
// prints (text for people, one JSON line for scripts).
//
// Thread-safety: pure functions and plain values.
#ifndef KVSERVE_BENCH_LOADGEN_STATS_H_
#define KVSERVE_BENCH_LOADGEN_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvserve {

struct LatencyPercentiles {
  int64_t count = 0;
  double mean_s = 0;
  double p50_s = 0;
  double p90_s = 0;
  double p99_s = 0;
  double p999_s = 0;  // the tail a stream meets once in a thousand tokens
  double max_s = 0;
};

// Nearest-rank percentiles of `samples_s` (seconds); all zero when empty.
LatencyPercentiles Percentiles(std::vector<double> samples_s);

struct LoadSummary {
  int32_t concurrency = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  std::string first_error;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double wall_s = 0;
  LatencyPercentiles ttft;
  LatencyPercentiles inter_token;
  LatencyPercentiles e2e;
  double peak_kv_usage = 0;  // used / total blocks, from Worker.StreamStatus
  int64_t peak_kv_used_blocks = 0;
  int64_t kv_total_blocks = 0;

  double output_tokens_per_s() const { return wall_s > 0 ? output_tokens / wall_s : 0; }
};

std::string FormatSummary(const LoadSummary& summary);
std::string SummaryJson(const LoadSummary& summary);

}  // namespace kvserve

#endif  // KVSERVE_BENCH_LOADGEN_STATS_H_
