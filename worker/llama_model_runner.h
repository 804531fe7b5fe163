// LlamaModelRunner: the real ModelRunner. A LlamaModel over a HostKvPool (fp32, host memory) on a
// kernels::Backend that runs on host pointers (the CPU backend), with one kernels::Sampler.
// Each Execute: forget released sequences, copy forked blocks (every layer, K and V), build the
// flattened ForwardBatch from the per-sequence state (tokens, block tables), run one Forward, and
// sample every sequence the plan marks, from the logits of its last token.
//
// Ownership: the weights and backend are shared (the caller may keep using them read-only).
// Thread-safety: engine thread only (ModelRunner).
#ifndef KVSERVE_WORKER_LLAMA_MODEL_RUNNER_H_
#define KVSERVE_WORKER_LLAMA_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"
#include "model/model_weights.h"
#include "worker/model_runner.h"
#include "worker/runner_sequences.h"

namespace kvserve {

class LlamaModelRunner final : public ModelRunner {
 public:
  // INVALID_ARGUMENT when the weights do not validate or a pointer is null.
  static absl::StatusOr<std::unique_ptr<LlamaModelRunner>> Create(
      std::shared_ptr<const ModelWeights> weights, std::shared_ptr<kernels::Backend> backend);

  int32_t vocab_size() const override { return weights_->config.vocab_size; }
  int32_t max_context_len() const override { return weights_->config.max_context; }
  std::vector<int32_t> eos_token_ids() const override { return weights_->config.eos_token_ids; }
  int64_t KvBytesPerBlock(int32_t block_size) const override;
  absl::Status Initialize(const RunnerConfig& config) override;
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override;

 private:
  LlamaModelRunner(std::shared_ptr<const ModelWeights> weights,
                   std::shared_ptr<kernels::Backend> backend);

  void CopyBlock(const BlockCopy& copy);

  std::shared_ptr<const ModelWeights> weights_;
  std::shared_ptr<kernels::Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<HostKvPool> kv_pool_;
  std::optional<ForwardBatchBuilder> batch_;
  std::unique_ptr<RunnerSequences> sequences_;
  kernels::Sampler sampler_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_LLAMA_MODEL_RUNNER_H_
