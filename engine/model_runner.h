// ModelRunner: runs the engine's StepPlans on a model. The real one is LlamaModelRunner
// (llama_model_runner.h: host KV pool, LlamaModel, sampler); FakeModelRunner
// (fake_model_runner.h) is deterministic and needs no weights, for scheduler and service tests.
//
// Life cycle: the engine asks KvBytesPerBlock to size the pool, calls Initialize once, then
// Execute once per step, all on the engine thread. The runner owns the KV memory and the
// per-sequence state the plans' deltas update (step_plan.h).
//
// Thread-safety: used by one thread (the engine thread) after construction.
#ifndef KVSERVE_ENGINE_MODEL_RUNNER_H_
#define KVSERVE_ENGINE_MODEL_RUNNER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/step_plan.h"

namespace kvserve {

struct RunnerConfig {
  int32_t block_size = 16;
  int32_t num_blocks = 0;       // the null block included
  int32_t num_host_blocks = 0;  // blocks of the host KV tier; 0: none
  int32_t max_num_batched_tokens = 0;
  int32_t max_num_seqs = 0;
  int32_t max_context_len = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual int32_t vocab_size() const = 0;
  // The model's context window in tokens.
  virtual int32_t max_context_len() const = 0;
  // Tokens that end a choice unless ignore_eos.
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  // KV memory of one block of block_size tokens, all layers, K and V.
  virtual int64_t KvBytesPerBlock(int32_t block_size) const = 0;

  // Bytes the KV pool may take on the runner's device once the weights and the step buffers for
  // `config` (num_blocks ignored) are resident; UNIMPLEMENTED for a runner that cannot tell (the
  // engine then needs an explicit kv_memory_bytes or num_kv_blocks). Called at most once, before
  // Initialize.
  virtual absl::StatusOr<int64_t> ProfileKvBytes(const RunnerConfig& config) {
    (void)config;
    return absl::UnimplementedError("this runner cannot size the KV pool from device memory");
  }

  // Binds the calling thread to the runner's device (kernels::Backend::MakeCurrent): the engine
  // calls it once on its own thread before the first Execute, a tensor-parallel follower on its
  // step loop's, so a runner on cuda:1 (or a rank on GPU 3) runs there rather than on the
  // thread's default device 0. A runner without a device does nothing.
  virtual absl::Status BindThread() { return absl::OkStatus(); }

  // Allocates the KV pool and step buffers. Called once, before Execute.
  virtual absl::Status Initialize(const RunnerConfig& config) = 0;

  // Decode graphs (CUDA graphs of whole decode steps): how many Initialize captured, and
  // dropping them all so that every later step runs eagerly. A tensor-parallel group uses both
  // so that its ranks replay graphs together or not at all: a graph pads its batch to a bucket
  // and an eager rank does not, so their collectives would disagree in size and hang.
  virtual int32_t num_decode_graphs() const { return 0; }
  virtual void DropDecodeGraphs() {}

  // KV block transfer between workers (docs/kv-cache.md), on the engine thread between steps.
  // The byte format of one block as ReadKvBlock gives it and WriteHostKvBlock takes it (KV
  // dtype and shape, block size, the model): two runners can exchange blocks only when theirs
  // are equal. Empty (the default): this runner cannot, and the two calls are UNIMPLEMENTED.
  virtual std::string KvTransferFormat() const { return {}; }
  // Bytes of one block in that format (0 when the format is empty).
  virtual int64_t KvTransferBlockBytes() const { return 0; }
  // Appends the K/V of one block to *out: pool block `device`, or host-tier entry `host` when
  // device is kNullBlock.
  virtual absl::Status ReadKvBlock(BlockId device, HostBlockId host, std::string* out) {
    (void)device, (void)host, (void)out;
    return absl::UnimplementedError("this runner cannot move KV blocks");
  }
  // Overwrites host-tier entry `host` with one block's K/V as ReadKvBlock gives it.
  // INVALID_ARGUMENT for data of another size or an entry out of range.
  virtual absl::Status WriteHostKvBlock(HostBlockId host, std::string_view data) {
    (void)host, (void)data;
    return absl::UnimplementedError("this runner cannot move KV blocks");
  }

  // Executes one plan (order of work in step_plan.h). An error is fatal for the engine: it fails
  // every request with it.
  virtual absl::StatusOr<StepResult> Execute(const StepPlan& plan) = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_ENGINE_MODEL_RUNNER_H_
