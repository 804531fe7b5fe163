// FaultInjectingRunner: a TESTING AID, never for production. It wraps a ModelRunner and makes
// its Execute return INTERNAL ("fault injection: ...") from the `fail_at_step`-th call on, so
// that tests can make a real worker's engine fail mid-stream (kvserve-worker
// --fault_fail_step=N) and check what the worker, the router and the client see. Every other
// call is forwarded unchanged.
//
// Thread-safety: as ModelRunner (the engine thread only).
#ifndef KVSERVE_RUNNER_FAULT_INJECTING_RUNNER_H_
#define KVSERVE_RUNNER_FAULT_INJECTING_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model_runner.h"

namespace kvserve {

class FaultInjectingRunner final : public ModelRunner {
 public:
  // REQUIRES: runner != nullptr, fail_at_step >= 1 (1: the first step fails).
  FaultInjectingRunner(std::unique_ptr<ModelRunner> runner, int64_t fail_at_step);

  int32_t vocab_size() const override { return runner_->vocab_size(); }
  int32_t max_context_len() const override { return runner_->max_context_len(); }
  std::vector<int32_t> eos_token_ids() const override { return runner_->eos_token_ids(); }
  int64_t KvBytesPerBlock(int32_t block_size) const override {
    return runner_->KvBytesPerBlock(block_size);
  }
  absl::Status BindThread() override { return runner_->BindThread(); }
  int32_t num_decode_graphs() const override { return runner_->num_decode_graphs(); }
  void DropDecodeGraphs() override { runner_->DropDecodeGraphs(); }
  absl::StatusOr<int64_t> ProfileKvBytes(const RunnerConfig& config) override {
    return runner_->ProfileKvBytes(config);
  }
  absl::Status Initialize(const RunnerConfig& config) override {
    return runner_->Initialize(config);
  }
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override;
  std::string KvTransferFormat() const override { return runner_->KvTransferFormat(); }
  int64_t KvTransferBlockBytes() const override { return runner_->KvTransferBlockBytes(); }
  absl::Status ReadKvBlock(BlockId device, HostBlockId host, std::string* out) override {
    return runner_->ReadKvBlock(device, host, out);
  }
  absl::Status WriteHostKvBlock(HostBlockId host, std::string_view data) override {
    return runner_->WriteHostKvBlock(host, data);
  }

 private:
  std::unique_ptr<ModelRunner> runner_;
  const int64_t fail_at_step_;
  int64_t steps_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_FAULT_INJECTING_RUNNER_H_
