// The control messages a tensor-parallel leader sends its followers (tp/tensor_parallel_runner.h),
// as bytes: a command and, for a step, the whole StepPlan. The encoding is a flat run of
// little-endian fixed-width fields and length-prefixed arrays, written and read in one order
// (no field tags, no versioning): every rank of a group runs the same binary, so the two ends
// always agree, and a decode plan of a few sequences is a few hundred bytes.
//
// Thread-safety: plain functions.
#ifndef KVSERVE_TP_TP_MESSAGES_H_
#define KVSERVE_TP_TP_MESSAGES_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/model_runner.h"
#include "engine/step_plan.h"

namespace kvserve {

enum class TpCommand : uint8_t {
  kKeepAlive = 0,   // nothing to do: the leader is idle (followers' waits stay within timeout)
  kProfile = 1,     // ProfileKvBytes(config), then AllGather of every rank's bytes
  kInitialize = 2,  // Initialize(config) with the leader's num_blocks, then AllGather of status
  kExecute = 3,     // Execute(plan)
  kStop = 4,        // the group is done: followers exit 0
};

struct TpMessage {
  TpCommand command = TpCommand::kKeepAlive;
  RunnerConfig config;  // kProfile, kInitialize
  StepPlan plan;        // kExecute
};

// Append the encoding of a message to *out: a command without data (kKeepAlive, kStop), one
// with a config (kProfile, kInitialize), and kExecute with its plan.
void EncodeTpMessage(TpCommand command, std::string* out);
void EncodeTpMessage(TpCommand command, const RunnerConfig& config, std::string* out);
void EncodeTpMessage(const StepPlan& plan, std::string* out);

// INVALID_ARGUMENT naming what is wrong when `bytes` is not a whole message.
absl::StatusOr<TpMessage> DecodeTpMessage(std::string_view bytes);

}  // namespace kvserve

#endif  // KVSERVE_TP_TP_MESSAGES_H_
