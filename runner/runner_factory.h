// CreateLlamaRunner: the one path from a model spec and device flags to a LlamaModelRunner, used
// by kvserve-worker, kvserve-generate and the benchmarks, so every tool runs what serves.
//
// Loads the weights (fp32, model/weights_loader.h), makes the backend (kernels/backend_factory.h),
// converts and copies the weights to it once (DeviceWeights) and drops the host copy.
// Thread-safety: plain functions.
#ifndef KVSERVE_RUNNER_RUNNER_FACTORY_H_
#define KVSERVE_RUNNER_RUNNER_FACTORY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "kernels/kernels.h"
#include "model/model_config.h"
#include "model/tensor_parallel.h"
#include "runner/llama_model_runner.h"

namespace kvserve {

struct RunnerFactoryOptions {
  std::string model;           // a spec for LoadWeights
  std::string device = "cpu";  // cpu, cuda, cuda:N
  // Weights: auto (CPU: as the file stores them, GGUF blocks included; CUDA: bfloat16),
  // float32, bfloat16, float16.
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";  // auto (= the weights'), float32, bfloat16, float16
  int32_t num_threads = 0;              // CPU threads; 0: one per core
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  // This process's rank of a tensor-parallel group (model/tensor_parallel.h): only its share
  // of the weights is loaded, and comm (borrowed; it must outlive the runner) is the group's.
  TensorParallel tensor_parallel = {};
  // When set, makes the group's communicator once the rank's backend exists (a CUDA rank's
  // NCCL communicator works on its backend's stream) and replaces tensor_parallel.comm with it.
  // The communicator is the caller's (borrowed; it must outlive the runner).
  std::function<absl::StatusOr<Communicator*>(kernels::Backend* backend)> make_comm = nullptr;
  // When set, the runner computes on what this returns for the backend made for `device` (a
  // benchmark's kernels::TimedBackend around it, say).
  std::function<std::shared_ptr<kernels::Backend>(std::shared_ptr<kernels::Backend>)> wrap_backend =
      nullptr;
};

struct CreatedRunner {
  std::unique_ptr<LlamaModelRunner> runner;
  ModelConfig config;
  std::string backend_name;  // "cpu", "cuda"
  int64_t weight_bytes = 0;  // resident on the device
  // Of those, the bytes every forward step reads (not the embedding table).
  int64_t weight_bytes_per_step = 0;
  kernels::DType weight_dtype = kernels::DType::kF32;  // of the matrices converted at load
  // What the matrices are stored as, e.g. "bf16" or "f32+q4_1x210+q6_kx1" (stored types x count).
  std::string weight_types;
  // Block-type matrices this rank holds in the converted dtype instead, because its column
  // slice does not fall on block boundaries (ModelWeights::decoded_for_shard).
  int32_t num_converted_for_shard = 0;
  KvDtype kv_dtype = KvDtype::kF32;
};

// INVALID_ARGUMENT naming the flag for a bad value; FAILED_PRECONDITION naming the cause when the
// device is not there (no GPU, a build without CUDA); loader errors as LoadWeights gives them.
absl::StatusOr<CreatedRunner> CreateLlamaRunner(const RunnerFactoryOptions& options);

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_RUNNER_FACTORY_H_
