// FakeModelRunner: a deterministic ModelRunner without weights, for scheduler, engine and service
// tests, and for simulated workers (a step lasts what a StepTimeModel says) in cluster-scale
// routing benchmarks. It keeps a fake KV pool that stores, per slot, the token and position written
// there; before sampling a sequence it reads its whole context back through its block table (so a
// wrong slot mapping, block table, fork copy or prefix-cache hit is an INTERNAL error, not a silent
// pass) and synthesises the logits from a hash of that context. Tokens are then drawn by the real
// kernels::Sampler, so greedy, seeded sampling, penalties and logprobs behave as with a model.
//
// Thread-safety: engine thread only (ModelRunner). The counters are for tests, read after the
// engine stopped or from the engine thread.
#ifndef KVSERVE_RUNNER_FAKE_MODEL_RUNNER_H_
#define KVSERVE_RUNNER_FAKE_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "engine/model_runner.h"
#include "kernels/sampling.h"
#include "runner/host_copies.h"
#include "runner/runner_sequences.h"

namespace kvserve {

// A simulated step's duration, fitted to a real worker's steps (bench/calibrate_step_time.py):
//   fixed_ms + prefill_token_ms * prefill tokens + decode_token_ms * decode tokens
//            + prefill_attention_ms_per_mtoken * prefill attended tokens / 1e6
//            + decode_attention_ms_per_mtoken * decode context tokens / 1e6
// where prefill attended tokens sum, over the prefill chunks, tokens computed times the context
// at the step's end, and decode context tokens sum the decodes' contexts (StepMetrics, the same
// counts). Two attention terms: a prefill chunk's attention is compute, a decode's a cache read.
struct StepTimeModel {
  double fixed_ms = 0;
  double prefill_token_ms = 0;
  double decode_token_ms = 0;
  double prefill_attention_ms_per_mtoken = 0;
  double decode_attention_ms_per_mtoken = 0;

  absl::Duration Of(int64_t prefill_tokens, int64_t decode_tokens, int64_t prefill_attended,
                    int64_t decode_context) const;
  bool empty() const {
    return fixed_ms == 0 && prefill_token_ms == 0 && decode_token_ms == 0 &&
           prefill_attention_ms_per_mtoken == 0 && decode_attention_ms_per_mtoken == 0;
  }
};

struct FakeModelOptions {
  int32_t vocab_size = 256;
  int32_t max_context_len = 1024;
  std::vector<int32_t> eos_token_ids;                // none by default: choices run to max_tokens
  int64_t kv_bytes_per_token = 1024;                 // what KvBytesPerBlock reports per token
  absl::Duration step_delay = absl::ZeroDuration();  // sleep per Execute, to mimic a model
  // When set, each Execute lasts (at least) what the model says for its plan: a simulated
  // worker whose steps take as long as a real one's (kvserve-worker --runner=simulated).
  StepTimeModel step_time = {};
  // When not empty, the only tokens sampled (the others' logits are -inf). A simulated worker
  // emits plain words here, so that a reply appended to a conversation tokenizes to the same
  // ids again, as a real model's text mostly does, and histories grow as they would.
  std::vector<int32_t> output_token_ids = {};
};

class FakeModelRunner final : public ModelRunner {
 public:
  explicit FakeModelRunner(const FakeModelOptions& options = {});

  int32_t vocab_size() const override { return options_.vocab_size; }
  int32_t max_context_len() const override { return options_.max_context_len; }
  std::vector<int32_t> eos_token_ids() const override { return options_.eos_token_ids; }
  int64_t KvBytesPerBlock(int32_t block_size) const override {
    return options_.kv_bytes_per_token * block_size;
  }
  absl::Status Initialize(const RunnerConfig& config) override;
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override;
  // A block's bytes are its slots' (token, position) pairs, so a block imported for the wrong
  // tokens or positions fails the context check like any wrong K/V.
  std::string KvTransferFormat() const override;
  int64_t KvTransferBlockBytes() const override {
    return static_cast<int64_t>(sizeof(SlotContent)) * config_.block_size;
  }
  absl::Status ReadKvBlock(BlockId device, HostBlockId host, std::string* out) override;
  absl::Status WriteHostKvBlock(HostBlockId host, std::string_view data) override;

  // The logits the fake model gives after `context` (any tokens), for tests.
  static void ContextLogits(const std::vector<TokenId>& context, float* logits /* [vocab] */,
                            int32_t vocab);

  int64_t num_executed_steps() const { return num_executed_steps_; }
  int64_t num_computed_tokens() const { return num_computed_tokens_; }

 private:
  struct SlotContent {
    TokenId token = -1;
    int32_t position = -1;
  };

  int64_t Slot(const RunnerSequence& seq, int32_t position) const;
  // One block's slots (block copies, the host tier's). A host-tier load lands at the join, the
  // latest moment HostCopies allows: a forward that reads a block before its load was joined
  // reads what the block held before.
  void CopyBlock(const SlotContent* from, SlotContent* to) const;
  void RunPendingLoads();

  FakeModelOptions options_;
  RunnerConfig config_;
  std::vector<SlotContent> kv_;          // [num_blocks * block_size]
  std::vector<SlotContent> host_kv_;     // [num_host_blocks * block_size]: the host tier
  std::vector<HostCopy> pending_loads_;  // issued, not joined
  HostCopies host_copies_{HostCopies::Ops{
      .store =
          [this](BlockId device, HostBlockId host) {
            CopyBlock(&kv_[static_cast<size_t>(device) * config_.block_size],
                      &host_kv_[static_cast<size_t>(host) * config_.block_size]);
          },
      .load =
          [this](HostBlockId host, BlockId device) {
            pending_loads_.push_back({.to_host = false, .device = device, .host = host});
          },
      .join = [this] { RunPendingLoads(); }}};
  std::unique_ptr<RunnerSequences> sequences_;
  kernels::Sampler sampler_;
  std::vector<float> logits_;     // [vocab]
  std::vector<int32_t> banned_;   // tokens never sampled (all but output_token_ids)
  std::vector<TokenId> context_;  // scratch
  int64_t num_executed_steps_ = 0;
  int64_t num_computed_tokens_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_FAKE_MODEL_RUNNER_H_
