// How many bytes the KV pool may take on a device, from what the device reports after the
// weights and the largest step's buffers are resident (vLLM's gpu_memory_utilization rule):
//
//   budget = total * utilization - (total - free)
//
// i.e. the fraction `utilization` of the whole device is shared by everything kvserve holds, and
// memory other processes hold counts against it too. Pure; thread-safe.
#ifndef KVSERVE_RUNNER_KV_SIZING_H_
#define KVSERVE_RUNNER_KV_SIZING_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/kernels.h"

namespace kvserve {

// RESOURCE_EXHAUSTED, with the figures, when nothing is left for the KV pool.
// REQUIRES: 0 < utilization <= 1.
absl::StatusOr<int64_t> KvBudgetBytes(const kernels::MemoryInfo& after_profile, double utilization);

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_KV_SIZING_H_
