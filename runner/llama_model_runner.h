// LlamaModelRunner: the real ModelRunner. A LlamaModel over a KvPool, both in the memory of the
// weights' backend (host RAM on the CPU, GPU memory on CUDA), and one kernels::Sampler.
// Each Execute: forget released sequences, copy forked blocks (every layer, K and V), build the
// flattened ForwardBatch from the per-sequence state (tokens, block tables), run one forward on
// the device, and sample every sequence the plan marks, from the logits of its last token:
// a plain greedy choice (no penalties, no logprobs) takes the device's argmax (one int per row
// comes back); every other choice copies its logit row back and samples it with the CPU
// sampler, so its Philox draws are the same on every backend. A sequence that wants prompt
// logprobs then gets the logits of every prompt position of its chunk (LlamaModel::TokenLogits,
// the LM head over those positions' final hidden states) scored on the host.
//
// Pool sizing: ProfileKvBytes runs one forward at the largest step and returns what the device
// has left for the KV pool under `memory_utilization` (kv_sizing.h); Initialize then captures the
// decode graphs (CUDA) unless enforce_eager.
//
// Tensor parallelism: with weights that are one rank's shard (model/tensor_parallel.h) and the
// group's communicator, every rank runs the same plans (the leader's, with the leader's block
// tables) on its own KV pool of its KV heads, with the same number of blocks; KvBytesPerBlock
// and ProfileKvBytes are this rank's. Only the leader (rank 0) samples: a follower's Execute
// returns no tokens.
//
// Ownership: the weights are shared (the caller may keep using them read-only).
// Thread-safety: engine thread only (ModelRunner).
#ifndef KVSERVE_RUNNER_LLAMA_MODEL_RUNNER_H_
#define KVSERVE_RUNNER_LLAMA_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/task_thread.h"
#include "engine/model_runner.h"
#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "kvcache/kv_layout.h"
#include "model/device_weights.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"
#include "runner/host_copies.h"
#include "runner/runner_sequences.h"

namespace kvserve {

struct LlamaRunnerOptions {
  KvDtype kv_dtype = KvDtype::kF32;
  // Fraction of the device's memory the weights, step buffers and KV pool may take together
  // (ProfileKvBytes).
  double memory_utilization = 0.9;
  // No decode graphs: every step runs eagerly.
  bool enforce_eager = false;
  // The tensor-parallel group of the weights' shard (borrowed; outlives the runner); null for
  // unsharded weights.
  Communicator* comm = nullptr;
};

class LlamaModelRunner final : public ModelRunner {
 public:
  // INVALID_ARGUMENT when weights is null or the options are out of range.
  static absl::StatusOr<std::unique_ptr<LlamaModelRunner>> Create(
      std::shared_ptr<const DeviceWeights> weights, const LlamaRunnerOptions& options);

  int32_t vocab_size() const override { return weights_->config().vocab_size; }
  int32_t max_context_len() const override { return weights_->config().max_context; }
  std::vector<int32_t> eos_token_ids() const override { return weights_->config().eos_token_ids; }
  // This rank's KV heads only.
  int64_t KvBytesPerBlock(int32_t block_size) const override;
  absl::StatusOr<int64_t> ProfileKvBytes(const RunnerConfig& config) override;
  // The weights' backend's MakeCurrent.
  absl::Status BindThread() override;
  absl::Status Initialize(const RunnerConfig& config) override;
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override;

  // Decode graphs captured by Initialize (0 on the CPU or with enforce_eager).
  int32_t num_decode_graphs() const override { return model_ ? model_->num_decode_graphs() : 0; }
  void DropDecodeGraphs() override {
    if (model_) model_->DropDecodeGraphs();
  }
  // The format names the model, the KV layout (dtype, heads, head size, block size) and the
  // weights' compute dtype; empty for a tensor-parallel shard (a rank holds part of each block).
  std::string KvTransferFormat() const override;
  int64_t KvTransferBlockBytes() const override {
    return KvTransferFormat().empty() ? 0 : kv_pool_->layout().bytes_per_block();
  }
  absl::Status ReadKvBlock(BlockId device, HostBlockId host, std::string* out) override;
  absl::Status WriteHostKvBlock(HostBlockId host, std::string_view data) override;

  const LlamaModel* model() const { return model_.get(); }

 private:
  LlamaModelRunner(std::shared_ptr<const DeviceWeights> weights, const LlamaRunnerOptions& options);

  // Creates the model for `config`'s limits (once; ProfileKvBytes and Initialize share it).
  absl::Status CreateModel(const RunnerConfig& config);
  // Structured output: hands the constrained sampling rows of `work` to mask_thread_, which fills
  // their masks (masked_, masks_, mask_status_) while the forward runs.
  void StartMasks(const std::vector<RunnerWork>& work);
  // Samples the plan's sampling rows after a forward.
  absl::StatusOr<StepResult> Sample(const std::vector<RunnerWork>& work);
  // After Sample: the prompt logprobs of the sequences that want them (the leader only), from
  // the logits of every prompt position their step computed, max_logit_rows rows at a time.
  absl::Status ScorePrompts(const std::vector<RunnerWork>& work, StepResult* result);

  std::shared_ptr<const DeviceWeights> weights_;
  LlamaRunnerOptions options_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<KvPool> kv_pool_;
  std::unique_ptr<HostKvPool> host_kv_;    // null without a host tier
  std::optional<HostCopies> host_copies_;  // with a host tier: runs its copies
  std::optional<ForwardBatchBuilder> batch_;
  std::unique_ptr<RunnerSequences> sequences_;
  kernels::Sampler sampler_;
  std::vector<int32_t> host_rows_;  // logit rows to copy back, per step
  // Structured output: the sequences whose rows this step masks, in row order, their masks
  // ([masked_.size(), MaskWords(vocab)]) and how filling them went.
  std::vector<RunnerSequence*> masked_;
  std::vector<uint32_t> masks_;
  absl::Status mask_status_;
  TaskThread mask_thread_;  // fills them beside the forward; last, so it stops first
};

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_LLAMA_MODEL_RUNNER_H_
