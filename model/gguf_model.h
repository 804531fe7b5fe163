// Turning a parsed GGUF file into a ModelConfig and fp32 ModelWeights (llama and qwen2
// architectures, llama.cpp tensor naming: token_embd, blk.N.attn_q, ..., output_norm, output).
// Stateless functions; the GgufFile is only read.
//
// GGUF lists a tensor's dims fastest-first, so a weight with ggml dims [in, out] is row-major
// [out, in], exactly ModelWeights' layout: decoding needs no transpose.
#ifndef KVSERVE_MODEL_GGUF_MODEL_H_
#define KVSERVE_MODEL_GGUF_MODEL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace kvserve {

// Reads the model shape from `<arch>.*` and `tokenizer.ggml.*` metadata. rope_style is
// kInterleaved for llama (llama.cpp permuted Q/K rows at conversion) and kHalf for qwen2.
// INVALID_ARGUMENT / NOT_FOUND naming the key for a missing or malformed value; UNIMPLEMENTED
// for an architecture or RoPE variant we do not run. The result passes ModelConfig::Validate.
absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& file);

struct GgufLoadOptions {
  int num_threads = 2;            // dequantization threads
  int64_t max_total_floats = -1;  // refuse (RESOURCE_EXHAUSTED) models larger than this; -1: no cap
  // Leave every matrix that is not F32 in the file as it is stored (ModelWeights::stored, views
  // into `file`, which the caller keeps alive through ModelWeights::storage).
  bool keep_stored_types = false;
  // Read only the share of rank tp_rank of a tensor-parallel group of tp_size
  // (tensor_parallel.h): row slices stay views into the file, column slices are gathered row by
  // row (or decoded to fp32 when they do not fall on block boundaries).
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
};

// ConfigFromGguf, then every tensor checked against the config's shapes (a missing tensor or a
// shape mismatch is INVALID_ARGUMENT naming the tensor) and dequantized to fp32. A shard that
// cannot be made (tensor_parallel.h) is INVALID_ARGUMENT naming the numbers.
absl::StatusOr<ModelWeights> WeightsFromGguf(const GgufFile& file,
                                             const GgufLoadOptions& options = {});

}  // namespace kvserve

#endif  // KVSERVE_MODEL_GGUF_MODEL_H_
