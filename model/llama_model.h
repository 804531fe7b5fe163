// LlamaModel: the Llama-family decoder forward pass (Llama 2/3, Mistral, Qwen2, SmolLM2) over a
// flattened batch and the paged KV cache, written against the kernel interface (kernels.h).
//
// It reads like llama2.c: the model's shape (ModelConfig), its weights (ModelWeights, borrowed)
// and a RunState of activation buffers allocated ONCE, at construction, for the largest step
// (ForwardLimits); Forward allocates nothing. One step:
//   x = embed(ids)
//   per layer:  h = rmsnorm(x)            q, k, v = h Wq^T, h Wk^T, h Wv^T (+ biases)
//               rope(q, k, positions)     write k, v to their slots of this layer's pool
//               a = paged_attention(q, block tables)            x += a Wo^T
//               h = rmsnorm(x)            x += (silu(h Wg^T) * h Wu^T) Wd^T
//   logits = rmsnorm(x)[logit_rows] Wout^T
// (each residual add is fused into the next RMSNorm).
//
// Memory: the weights, the KV pool and the RunState are host memory, so the backend must run on
// host pointers (kernels::cpu::CpuBackend). A GPU runner needs device copies of all three.
// Thread-safety: one Forward at a time (the engine thread owns the model); the borrowed weights
// may be shared read-only with other models.
#ifndef KVSERVE_MODEL_LLAMA_MODEL_H_
#define KVSERVE_MODEL_LLAMA_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/kernels.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"
#include "model/model_weights.h"

namespace kvserve {

// The largest step the RunState is sized for.
struct ForwardLimits {
  int32_t max_num_tokens = 2048;  // tokens per step (max_num_batched_tokens)
  int32_t max_num_seqs = 64;      // sequences per step
  int32_t max_context_len = 0;    // longest context; 0: the model's max_context
  int32_t max_logit_rows = 0;     // rows of logits per step; 0: max_num_seqs
};

class LlamaModel {
 public:
  // Binds weights (borrowed: they must outlive the model) to backend (borrowed) and allocates
  // the RunState for `limits` and attention over blocks of block_size tokens.
  // INVALID_ARGUMENT when the weights do not validate, a limit is not positive, or block_size
  // is invalid.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const ModelWeights* weights,
                                                            kernels::Backend* backend,
                                                            const ForwardLimits& limits,
                                                            int32_t block_size);

  // The layout of the KV pool this model writes and reads (fp32, all KV heads).
  KvLayout kv_layout() const;

  // Runs one step: writes the K/V of every token of the batch into `kv` and returns the logits
  // of the rows batch.logit_rows, [R, vocab] row-major, in a buffer owned by the model and valid
  // until the next Forward. INVALID_ARGUMENT when the batch exceeds the limits or is
  // inconsistent (sizes, token ids, query_start, logit rows, context lengths, slots or block
  // ids outside the pool); FAILED_PRECONDITION when kv does not match kv_layout(). Slots are
  // not checked for duplicates (the manager hands each slot to one token).
  absl::StatusOr<absl::Span<const float>> Forward(const ForwardBatch& batch, HostKvPool& kv);

  const ModelConfig& config() const { return weights_->config; }
  const ForwardLimits& limits() const { return limits_; }
  int32_t block_size() const { return block_size_; }

 private:
  // Activation buffers of one step, sized for ForwardLimits; T = tokens, R = logit rows.
  struct RunState {
    std::vector<float> residual;  // [T, hidden]  the residual stream x
    std::vector<float> normed;    // [T, hidden]  rmsnorm(x)
    std::vector<float> delta;     // [T, hidden]  attention or MLP output, added to x next
    std::vector<float> q;         // [T, num_heads * head_dim]
    std::vector<float> k;         // [T, num_kv_heads * head_dim]
    std::vector<float> v;         // [T, num_kv_heads * head_dim]
    std::vector<float> attn;      // [T, num_heads * head_dim]
    std::vector<float> gate;      // [T, intermediate]  then silu(gate) * up
    std::vector<float> up;        // [T, intermediate]
    std::vector<float> last;      // [R, hidden]  normed rows that need logits
    std::vector<float> logits;    // [R, vocab]
    std::vector<uint8_t> attention_workspace;  // Backend::AttentionWorkspaceBytes()
  };

  LlamaModel(const ModelWeights* weights, kernels::Backend* backend, const ForwardLimits& limits,
             int32_t block_size);

  absl::Status ValidateBatch(const ForwardBatch& batch, const HostKvPool& kv) const;
  // y = x W^T (+ bias) for the first num_tokens rows.
  void Linear(const float* x, const std::vector<float>& w, const float* bias /* or nullptr */,
              float* y, int32_t num_tokens, int32_t in_features, int32_t out_features);
  void Attention(const ForwardBatch& batch, const LayerWeights& layer, int32_t layer_index,
                 HostKvPool& kv);
  void Mlp(int32_t num_tokens, const LayerWeights& layer);

  const ModelWeights* weights_;
  kernels::Backend* backend_;
  ForwardLimits limits_;
  int32_t block_size_;
  kernels::RopeConfig rope_;
  RunState state_;
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_LLAMA_MODEL_H_
