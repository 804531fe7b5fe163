#include "bench/loadgen_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"

namespace kvserve {

LatencyPercentiles Percentiles(std::vector<double> samples_s) {
  LatencyPercentiles result;
  if (samples_s.empty()) return result;
  std::sort(samples_s.begin(), samples_s.end());
  const auto rank = [&](double q) {
    const size_t index = static_cast<size_t>(std::ceil(q * samples_s.size()));
    return samples_s[std::clamp<size_t>(index, 1, samples_s.size()) - 1];
  };
  result.count = static_cast<int64_t>(samples_s.size());
  result.mean_s = std::accumulate(samples_s.begin(), samples_s.end(), 0.0) / samples_s.size();
  result.p50_s = rank(0.50);
  result.p90_s = rank(0.90);
  result.p99_s = rank(0.99);
  result.p999_s = rank(0.999);
  result.max_s = samples_s.back();
  return result;
}

std::string FormatSummary(const LoadSummary& s) {
  std::string text = absl::StrFormat(
      "concurrency %d: %d ok, %d failed in %.2f s\n"
      "  output tokens/s    %.1f  (%d output, %d prompt tokens)\n"
      "  TTFT               p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  (n=%d)\n"
      "  inter-token        p50 %.1f ms  p99 %.1f ms  p99.9 %.1f ms  (n=%d)\n"
      "  e2e latency        p50 %.2f s   p99 %.2f s\n"
      "  peak KV usage      %.1f%%  (%d of %d blocks)",
      s.concurrency, s.succeeded, s.failed, s.wall_s, s.output_tokens_per_s(), s.output_tokens,
      s.prompt_tokens, s.ttft.p50_s * 1e3, s.ttft.p90_s * 1e3, s.ttft.p99_s * 1e3, s.ttft.count,
      s.inter_token.p50_s * 1e3, s.inter_token.p99_s * 1e3, s.inter_token.p999_s * 1e3,
      s.inter_token.count, s.e2e.p50_s, s.e2e.p99_s, s.peak_kv_usage * 100, s.peak_kv_used_blocks,
      s.kv_total_blocks);
  if (!s.first_error.empty()) text += "\n  first error: " + s.first_error;
  return text;
}

std::string SummaryJson(const LoadSummary& s) {
  return absl::StrFormat(
      "{\"concurrency\": %d, \"succeeded\": %d, \"failed\": %d, \"wall_s\": %.3f, "
      "\"output_tokens\": %d, \"prompt_tokens\": %d, \"output_tokens_per_s\": %.2f, "
      "\"ttft_p50_ms\": %.2f, \"ttft_p90_ms\": %.2f, \"ttft_p99_ms\": %.2f, "
      "\"itl_p50_ms\": %.2f, \"itl_p99_ms\": %.2f, \"itl_p999_ms\": %.2f, "
      "\"e2e_p50_s\": %.3f, \"e2e_p99_s\": %.3f, "
      "\"peak_kv_usage\": %.4f}",
      s.concurrency, s.succeeded, s.failed, s.wall_s, s.output_tokens, s.prompt_tokens,
      s.output_tokens_per_s(), s.ttft.p50_s * 1e3, s.ttft.p90_s * 1e3, s.ttft.p99_s * 1e3,
      s.inter_token.p50_s * 1e3, s.inter_token.p99_s * 1e3, s.inter_token.p999_s * 1e3, s.e2e.p50_s,
      s.e2e.p99_s, s.peak_kv_usage);
}

}  // namespace kvserve
