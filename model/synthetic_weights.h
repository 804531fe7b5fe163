// Synthetic models: random fp32 weights of any Llama shape, for tests and benchmarks that need
// the real sizes but not the real values. Named presets give common shapes.
//
// Values are deterministic in (seed, tensor name): a layer's weights do not depend on how many
// layers the model has, so "llama3-8b" cut to 2 layers holds the first 2 layers of the full one.
// Matrices are uniform with standard deviation 1/sqrt(fan_in) (so activations keep their scale
// through each projection), norms are 1 + U(-0.1, 0.1), biases have std 0.02. Generation runs on
// two threads. Stateless; thread-safe.
//
// Memory (fp32, 4 bytes per parameter):
//   tiny          2 layers x 64 wide, 4 heads, 2 KV heads, ffn 192, vocab 256, untied:
//                 131,392 params, 0.5 MB
//   tiny-qwen2    as tiny, qwen2 with Q/K/V biases, tied: 115,264 params, 0.5 MB
//   tiny-tp       2 layers x 128 wide, 8 heads, 4 KV heads (head_dim 16), ffn 256, vocab 256,
//                 untied: 361,088 params, 1.4 MB; splits over 1, 2, 4 or 8 tensor-parallel
//                 ranks (KV heads replicated at 8)
//   smollm2-135m  30 x 576, 9 heads, 3 KV heads, ffn 1536, vocab 49152 (tied):
//                 134,515,008 params, 538 MB
//   llama3-8b     32 x 4096, 32 heads, 8 KV heads, ffn 14336, vocab 128256, theta 500000
//                 (untied): 8,030,261,248 params, 32.1 GB: too big for
//                 most test machines; use num_layers (each layer 218 M params, 872 MB; the
//                 embedding and lm_head together 1051 M params, 4.2 GB)
#ifndef KVSERVE_MODEL_SYNTHETIC_WEIGHTS_H_
#define KVSERVE_MODEL_SYNTHETIC_WEIGHTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace kvserve {

// The config of a named preset (see above). NOT_FOUND listing the presets for an unknown name.
absl::StatusOr<ModelConfig> SyntheticConfig(std::string_view preset);
std::vector<std::string> SyntheticPresetNames();

// Number of fp32 parameters ModelWeights holds for `config` (lm_head counted unless tied).
int64_t NumParameters(const ModelConfig& config);

// Random weights of `config`'s shape; with tp_size > 1 only the share of rank tp_rank
// (tensor_parallel.h), holding exactly the values the whole model holds there.
// REQUIRES: config.Validate().ok() and MakeTensorShard(config, tp_rank, tp_size).ok().
ModelWeights MakeSyntheticWeights(const ModelConfig& config, uint64_t seed, int32_t tp_rank = 0,
                                  int32_t tp_size = 1);

}  // namespace kvserve

#endif  // KVSERVE_MODEL_SYNTHETIC_WEIGHTS_H_
