// LlamaModel: the Llama-family decoder forward pass (Llama 2/3, Mistral, Qwen2, SmolLM2) over a
// flattened batch and the paged KV cache, written against the kernel interface (kernels.h).
//
// It reads like llama2.c: the model's shape (ModelConfig), its weights (DeviceWeights, borrowed,
// typed and resident in the backend's memory) and a RunState of activation and metadata buffers
// allocated ONCE in the backend's memory, at construction, for the largest step
// (ForwardLimits); Forward allocates nothing. One step:
//   x = embed(ids)
//   per layer:  h = rmsnorm(x)            q, k, v = h Wq^T, h Wk^T, h Wv^T (+ biases)
//               rope(q, k, positions)     write k, v to their slots of this layer's pool
//               a = paged_attention(q, block tables)            x += a Wo^T
//               h = rmsnorm(x)            x += (silu(h Wg^T) * h Wu^T) Wd^T
//   logits = rmsnorm(x)[logit_rows] Wout^T          greedy = argmax(logits)
// (each residual add is fused into the next RMSNorm). The residual stream and every
// accumulation are fp32 whatever the weight and KV storage types.
//
// Tensor parallelism (model/tensor_parallel.h): with weights that are one rank's shard, the
// model computes its own query and KV heads and its slice of the MLP, and sums the outputs of
// the two row-parallel layers over the group in place (Communicator::AllReduceSum of the fp32
// [T, hidden] activations, after Wo and after Wd); everything else -- embedding, norms, the
// residual stream, lm_head and the logits -- is replicated, so every rank ends a step with the
// same logits (the leader's are the ones sampled). Every rank must run the same batches in the
// same order.
//
// Memory: the same code runs on every backend. The host-side batch (ForwardBatch) is validated,
// packed into one staging buffer and copied to the backend's metadata buffer in one copy; the
// kernels only ever see backend memory. Results stay on the backend until asked for: the greedy
// token of every row (one int per row) or the logits of chosen rows.
//
// Decode graphs: CaptureDecodeGraphs records, for each batch-size bucket, a whole decode step
// (all sequences one token) as a backend Graph (CUDA graphs); a later decode step of S sequences
// replays the smallest bucket >= S, padded with empty sequences (slot -1, context 1 over the
// null block). Backends without graphs (the CPU) run every step eagerly.
//
// Thread-safety: one Forward at a time (the engine thread owns the model); the borrowed weights
// may be shared read-only with other models.
#ifndef KVSERVE_MODEL_LLAMA_MODEL_H_
#define KVSERVE_MODEL_LLAMA_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "kernels/kernels.h"
#include "model/device_buffer.h"
#include "model/device_weights.h"
#include "model/forward_batch.h"
#include "model/kv_pool.h"

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
  // Binds weights (borrowed: they must outlive the model; the model runs on their backend) and
  // allocates the RunState for `limits`, attention over blocks of block_size tokens and a KV
  // cache stored as kv_dtype. `comm` (borrowed) is the tensor-parallel group of the weights'
  // shard; it may be null only for unsharded weights. INVALID_ARGUMENT when a limit is not
  // positive, block_size is invalid, kv_dtype unsupported, or comm's rank and size are not the
  // shard's; RESOURCE_EXHAUSTED when the backend has not the memory.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const DeviceWeights* weights,
                                                            const ForwardLimits& limits,
                                                            int32_t block_size,
                                                            KvDtype kv_dtype = KvDtype::kF32,
                                                            Communicator* comm = nullptr);

  // The layout of the KV pool this model writes and reads (this rank's KV heads, kv_dtype).
  KvLayout kv_layout() const;

  // Runs one step on the backend: writes the K/V of every token of the batch into `kv` and
  // leaves the logits of the rows batch.logit_rows, and their argmax, in backend memory.
  // INVALID_ARGUMENT when the batch exceeds the limits or is inconsistent (sizes, token ids,
  // query_start, logit rows, context lengths, slots or block ids outside the pool);
  // FAILED_PRECONDITION when kv does not match kv_layout(); INTERNAL when the backend reported
  // an error; the communicator's error when an all-reduce failed (the model is then unusable,
  // as its group is). Slots are not checked for duplicates (the manager hands each slot to one
  // token).
  absl::Status ForwardOnDevice(const ForwardBatch& batch, KvPool& kv);

  // After ForwardOnDevice: the argmax of each logit row ([R] token ids, ties to the lowest id),
  // copied to the host; valid until the next step. INTERNAL when the backend failed.
  absl::StatusOr<absl::Span<const int32_t>> GreedyTokens();
  // After ForwardOnDevice: the logits of the logit rows `rows` (indices into [0, R)), copied to
  // the host as [rows.size(), vocab]; valid until the next call, and the caller's to change (a
  // structured-output mask is applied in place). INTERNAL when the backend failed.
  absl::StatusOr<absl::Span<float>> LogitRows(absl::Span<const int32_t> rows);

  // After ForwardOnDevice: the logits of the batch's tokens first_token .. first_token + count - 1
  // (indices into the step's [0, T)), whatever its logit_rows, computed from the step's final
  // hidden states and copied to the host as [count, vocab]; valid until the next call. It reuses
  // the logit buffers, so the step's own logit rows must have been read before (GreedyTokens,
  // LogitRows). INVALID_ARGUMENT when count > max_logit_rows or the range is outside the step;
  // INTERNAL when the backend failed.
  absl::StatusOr<absl::Span<const float>> TokenLogits(int32_t first_token, int32_t count);

  // ForwardOnDevice, then every logit row on the host: [R, vocab], row-major, valid until the
  // next step.
  absl::StatusOr<absl::Span<const float>> Forward(const ForwardBatch& batch, KvPool& kv);

  // Records a decode step for each batch size in `batch_sizes` (each <= max_num_seqs and
  // <= max_logit_rows) over `kv`, which decode steps must then use. Returns how many graphs were
  // captured: 0 on a backend without graphs. Runs each bucket once eagerly first (so every
  // library has its workspace) on the null block; the cache is not changed.
  absl::StatusOr<int32_t> CaptureDecodeGraphs(KvPool& kv, absl::Span<const int32_t> batch_sizes);
  int32_t num_decode_graphs() const { return static_cast<int32_t>(graphs_.size()); }
  // Forgets the decode graphs: every later step runs eagerly.
  void DropDecodeGraphs() {
    graphs_.clear();
    graph_pool_ = nullptr;
  }

  const ModelConfig& config() const { return weights_->config(); }
  const ForwardLimits& limits() const { return limits_; }
  int32_t block_size() const { return block_size_; }
  kernels::Backend* backend() const { return backend_; }
  // Backend memory the RunState takes (activations, metadata, attention workspace).
  int64_t activation_bytes() const { return activation_bytes_; }

 private:
  // The scalar shape of one step, fixed when a graph records it.
  struct StepShape {
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t num_logit_rows = 0;
    int32_t max_query_len = 0;
    int32_t max_context_len = 0;
    int32_t block_table_stride = 0;
  };

  // Backend buffers of one step, sized for ForwardLimits; T = tokens, R = logit rows.
  struct RunState {
    float* residual;  // [T, hidden]  the residual stream x
    float* normed;    // [T, hidden]  rmsnorm(x)
    float* delta;     // [T, hidden]  attention or MLP output, added to x next
    // Head counts and intermediate are the shard's (tensor_parallel.h).
    float* q;         // [T, num_heads * head_dim]
    float* k;         // [T, num_kv_heads * head_dim]
    float* v;         // [T, num_kv_heads * head_dim]
    float* attn;      // [T, num_heads * head_dim]
    float* gate;      // [T, intermediate]  then silu(gate) * up
    float* up;        // [T, intermediate]
    float* last;      // [R, hidden]  normed rows that need logits
    float* logits;    // [R, vocab]
    int32_t* greedy;  // [R]  argmax of each logit row
    // Step metadata, one buffer (one copy per step), laid out as MetadataLayout says.
    int32_t* token_ids;     // [T]
    int32_t* positions;     // [T]
    int32_t* slot_mapping;  // [T]
    int32_t* query_start;   // [S + 1]
    int32_t* context_lens;  // [S]
    int32_t* logit_rows;    // [R]
    int32_t* block_tables;  // [S, max_blocks_per_seq]
    void* attention_workspace;
    size_t attention_workspace_bytes;
  };

  LlamaModel(const DeviceWeights* weights, const ForwardLimits& limits, int32_t block_size,
             KvDtype kv_dtype, Communicator* comm);
  absl::Status AllocateRunState();

  absl::Status ValidateBatch(const ForwardBatch& batch, const KvPool& kv) const;
  // Packs the batch's metadata into the staging buffer (padded to `shape` for a graph) and
  // copies it to the backend.
  void UploadMetadata(const ForwardBatch& batch, const StepShape& shape);
  // Every kernel of one step of `shape` over the uploaded metadata (what a graph records).
  void Compute(const StepShape& shape, KvPool& kv);
  void Linear(const float* x, const WeightView& w, const float* bias, float* y, int32_t num_tokens);
  void Attention(const StepShape& shape, const DeviceLayer& layer, int32_t layer_index, KvPool& kv);
  void Mlp(int32_t num_tokens, const DeviceLayer& layer);
  // delta [num_tokens, hidden] summed over the tensor-parallel group, in place; the first
  // failure is kept in comm_status_ and later calls do nothing.
  void AllReduce(float* delta, int32_t num_tokens);
  // The decode graph to replay for `batch`, or nullptr (not a pure decode step, no bucket).
  kernels::Graph* DecodeGraphFor(const ForwardBatch& batch, const KvPool& kv, StepShape* shape);

  const DeviceWeights* weights_;
  kernels::Backend* backend_;
  Communicator* comm_;  // null for unsharded weights
  absl::Status comm_status_;
  ForwardLimits limits_;
  int32_t block_size_;
  int32_t max_blocks_per_seq_;  // ceil(max_context_len / block_size): the graphs' table stride
  KvDtype kv_dtype_;
  kernels::RopeConfig rope_;
  RunState state_{};
  std::vector<DeviceBuffer> buffers_;
  int64_t activation_bytes_ = 0;
  std::vector<int32_t> staging_;                               // host copy of the metadata buffer
  std::vector<int32_t> host_greedy_;                           // [R]
  std::vector<float> host_logits_;                             // [R, vocab]
  int32_t last_logit_rows_ = 0;                                // R of the last step
  int32_t last_num_tokens_ = 0;                                // T of the last step
  std::map<int32_t, std::unique_ptr<kernels::Graph>> graphs_;  // batch size -> decode graph
  const KvPool* graph_pool_ = nullptr;                         // the pool the graphs write
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_LLAMA_MODEL_H_
