#include "runner/kv_sizing.h"

#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<int64_t> KvBudgetBytes(const kernels::MemoryInfo& after_profile,
                                      double utilization) {
  const int64_t total = after_profile.total_bytes;
  const int64_t used = total - after_profile.free_bytes;
  const int64_t allowed = static_cast<int64_t>(static_cast<double>(total) * utilization);
  const int64_t budget = allowed - used;
  if (total <= 0 || budget <= 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("gpu_memory_utilization: ", utilization, " of ", total,
                     " bytes leaves no room for the KV ", "cache (", used,
                     " bytes already in use by the weights, step buffers and other processes)"));
  }
  return budget;
}

}  // namespace kvserve
