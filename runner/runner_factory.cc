#include "runner/runner_factory.h"

#include <cstdio>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/backend_factory.h"
#include "model/device_weights.h"
#include "model/kv_pool.h"
#include "model/weights_loader.h"

namespace kvserve {

absl::StatusOr<CreatedRunner> CreateLlamaRunner(const RunnerFactoryOptions& options) {
  const bool on_gpu = kernels::IsCudaDevice(options.device);
  KVSERVE_ASSIGN_OR_RETURN(kernels::DType dtype, ParseDType(options.dtype, on_gpu, "dtype"));
  KVSERVE_ASSIGN_OR_RETURN(KvDtype kv_dtype,
                           ParseKvDtype(options.kv_cache_dtype, dtype, "kv_cache_dtype"));
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_threads: must be >= 0, got ", options.num_threads));
  }
  // The device first: a missing GPU is reported before minutes of loading.
  std::string error;
  std::shared_ptr<kernels::Backend> backend =
      kernels::CreateBackend(options.device, options.num_threads, &error);
  if (backend == nullptr) {
    if (!on_gpu && options.device != "cpu") {
      return absl::InvalidArgumentError(absl::StrCat("device: ", error));
    }
    return absl::FailedPreconditionError(absl::StrCat("device ", options.device, ": ", error));
  }
  if (options.wrap_backend) backend = options.wrap_backend(std::move(backend));
  TensorParallel tensor_parallel = options.tensor_parallel;
  if (options.make_comm) {
    KVSERVE_ASSIGN_OR_RETURN(Communicator * comm, options.make_comm(backend.get()));
    tensor_parallel.comm = comm;
  }
  CreatedRunner created;
  created.backend_name = backend->name();
  created.weight_dtype = dtype;
  created.kv_dtype = kv_dtype;
  std::shared_ptr<const DeviceWeights> weights;
  {
    // On the CPU, "auto" computes from the file's own types (GGUF blocks, f16, bf16): the
    // kernels read them in place from the mapping, and decode reads a quarter of the bytes.
    const bool keep_stored = !on_gpu && options.dtype == "auto";
    absl::StatusOr<ModelWeights> host =  // dropped after the upload
        LoadWeights(options.model,
                    {.keep_stored_types = keep_stored, .tensor_parallel = tensor_parallel});
    if (!host.ok()) {
      return absl::Status(host.status().code(), absl::StrCat("model: ", host.status().message()));
    }
    created.config = host->config;
    created.weight_types = kernels::DTypeName(dtype);
    absl::btree_map<std::string, int> stored;
    for (const auto& [name, matrix] : host->stored) ++stored[kernels::DTypeName(matrix.dtype)];
    for (const auto& [type, count] : stored) {
      absl::StrAppend(&created.weight_types, "+", type, "x", count);
    }
    if (options.kv_cache_dtype == "auto" && keep_stored && !host->stored.empty()) {
      // Weights computed as stored on the CPU: an f16 cache, as llama.cpp's default. Half the
      // bytes of f32 per token: twice the tokens in the same pool, half the bytes attention reads
      // per step (widened with F16C). f16 rather than bf16: 3 more mantissa bits; against the
      // all-f32 path, bf16 measured a 3% higher mean KL divergence (bench/peer/fidelity.sh).
      created.kv_dtype = KvDtype::kF16;
    }
    created.num_converted_for_shard = static_cast<int32_t>(host->decoded_for_shard.size());
    if (!host->decoded_for_shard.empty()) {
      std::fprintf(stderr,
                   "kvserve: tensor-parallel rank %d of %d: %d matrices (%s, ...) have column "
                   "slices off their block boundaries; converted to %s at load\n",
                   tensor_parallel.rank, tensor_parallel.size, created.num_converted_for_shard,
                   host->decoded_for_shard.front().c_str(), kernels::DTypeName(dtype));
    }
    absl::StatusOr<std::unique_ptr<DeviceWeights>> uploaded =
        DeviceWeights::Upload(*host, std::move(backend), dtype);
    if (!uploaded.ok()) return uploaded.status();
    weights = *std::move(uploaded);
  }
  created.weight_bytes = weights->bytes();
  created.weight_bytes_per_step = weights->step_bytes();
  if (weights->num_packed() > 0) {
    absl::StrAppend(&created.weight_types, " (", weights->num_packed(), " packed)");
  }
  KVSERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<LlamaModelRunner> runner,
      LlamaModelRunner::Create(std::move(weights),
                               {.kv_dtype = created.kv_dtype,
                                .memory_utilization = options.gpu_memory_utilization,
                                .enforce_eager = options.enforce_eager,
                                .comm = tensor_parallel.comm}));
  created.runner = std::move(runner);
  return created;
}

}  // namespace kvserve
