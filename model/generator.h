// Generator: a small single-process generation loop over LlamaModel and the paged KV cache, for
// the kvserve-generate CLI and the benchmarks. Not the serving engine (worker/ has the
// scheduler); it runs one batch of prompts to completion:
//   add every prompt to the KvCacheManager (blocks, prefix cache), then step until all finish:
//   each step takes every decoding sequence (1 token each) and fills the rest of the token
//   budget with prefill chunks; block tables come from the manager, the ForwardBatchBuilder turns
//   them into slots; the last position of each completed prompt is sampled (kernels::Sampler,
//   counter-based RNG keyed by (seed + sequence index, token index)).
//
// Thread-safety: one Generate at a time. The weights and backend are borrowed and must outlive it.
#ifndef KVSERVE_MODEL_GENERATOR_H_
#define KVSERVE_MODEL_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/kernels.h"
#include "kernels/sampling.h"
#include "kvcache/kv_cache_manager.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/llama_model.h"

namespace kvserve {

struct GeneratorOptions {
  int32_t block_size = 16;
  int32_t max_num_tokens = 512;    // token budget of one step (prefill chunk size)
  int32_t max_num_seqs = 64;       // sequences in one Generate call at most
  int32_t max_context_len = 2048;  // prompt + generated tokens of one sequence at most
};

struct GenerateRequest {
  kernels::SamplingParams sampling;     // temperature 0: greedy
  int32_t max_tokens = 64;              // generated tokens per sequence
  std::vector<int32_t> stop_token_ids;  // e.g. the model's EOS ids; the stop token is emitted
};

struct GenerationStats {
  int64_t prompt_tokens = 0;         // computed in prefill steps
  int64_t cached_prompt_tokens = 0;  // served by the prefix cache
  double prefill_seconds = 0.0;      // wall time of steps that held prefill chunks
  int64_t decode_tokens = 0;         // tokens computed in decode-only steps
  double decode_seconds = 0.0;       // wall time of decode-only steps
  int64_t steps = 0;
};

class Generator {
 public:
  // Sized for options: the KV pool holds max_num_seqs full contexts (plus the null block).
  static absl::StatusOr<std::unique_ptr<Generator>> Create(const ModelWeights* weights,
                                                           kernels::Backend* backend,
                                                           const GeneratorOptions& options);

  // Called with (sequence index, token id) as soon as each token is sampled.
  using TokenCallback = std::function<void(int32_t, int32_t)>;

  // Generates for every prompt; outputs[i] receives the tokens of prompts[i].
  // INVALID_ARGUMENT for an empty prompt, too many prompts, or prompt + max_tokens beyond
  // max_context_len.
  absl::StatusOr<GenerationStats> Generate(absl::Span<const std::vector<int32_t>> prompts,
                                           const GenerateRequest& request,
                                           const TokenCallback& on_token,
                                           std::vector<std::vector<int32_t>>* outputs);

  LlamaModel& model() { return *model_; }
  const KvCacheManager& cache_manager() const { return *manager_; }

 private:
  Generator(const GeneratorOptions& options, std::unique_ptr<LlamaModel> model,
            std::unique_ptr<HostKvPool> pool, std::unique_ptr<KvCacheManager> manager);

  GeneratorOptions options_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<HostKvPool> pool_;
  std::unique_ptr<KvCacheManager> manager_;
  ForwardBatchBuilder builder_;
  kernels::Sampler sampler_;
  uint64_t next_sequence_id_ = 1;
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_GENERATOR_H_
