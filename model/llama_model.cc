#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

kernels::RopeConfig ToKernelRope(const ModelConfig& config) {
  kernels::RopeConfig rope;
  rope.head_dim = config.head_dim;
  rope.theta = config.rope_theta;
  rope.style = config.rope_style == RopeStyle::kInterleaved ? kernels::RopeStyle::kInterleaved
                                                            : kernels::RopeStyle::kHalf;
  switch (config.rope_scaling.type) {
    case RopeScaling::Type::kNone:
      rope.scaling = kernels::RopeScalingType::kNone;
      break;
    case RopeScaling::Type::kLinear:
      rope.scaling = kernels::RopeScalingType::kLinear;
      break;
    case RopeScaling::Type::kLlama3:
      rope.scaling = kernels::RopeScalingType::kLlama3;
      break;
  }
  rope.factor = config.rope_scaling.factor;
  rope.low_freq_factor = config.rope_scaling.low_freq_factor;
  rope.high_freq_factor = config.rope_scaling.high_freq_factor;
  rope.original_max_position = config.rope_scaling.original_max_position;
  return rope;
}

absl::Status BatchError(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", what));
}

// Offsets (in int32s) of each array in the metadata buffer, for the limits' largest step.
struct MetadataLayout {
  int64_t token_ids, positions, slot_mapping, query_start, context_lens, logit_rows, block_tables,
      total;
  MetadataLayout(int64_t max_tokens, int64_t max_seqs, int64_t max_rows, int64_t max_blocks) {
    token_ids = 0;
    positions = token_ids + max_tokens;
    slot_mapping = positions + max_tokens;
    query_start = slot_mapping + max_tokens;
    context_lens = query_start + max_seqs + 1;
    logit_rows = context_lens + max_seqs;
    block_tables = logit_rows + max_rows;
    total = block_tables + max_seqs * max_blocks;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const DeviceWeights* weights,
                                                               const ForwardLimits& limits,
                                                               int32_t block_size, KvDtype kv_dtype,
                                                               Communicator* comm) {
  if (weights == nullptr) return absl::InvalidArgumentError("LlamaModel: weights must be non-null");
  const TensorShard& shard = weights->shard();
  if (comm == nullptr ? shard.size != 1
                      : comm->size() != shard.size || comm->rank() != shard.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LlamaModel: the weights are tensor-parallel rank ", shard.rank, " of ", shard.size,
        comm == nullptr
            ? ", and no communicator was given"
            : absl::StrCat(", the communicator is rank ", comm->rank(), " of ", comm->size())));
  }
  KVSERVE_RETURN_IF_ERROR(ValidateBlockSize(block_size));
  if (absl::StatusOr<kernels::DType> dtype = KvKernelDType(kv_dtype); !dtype.ok()) {
    return dtype.status();
  }
  ForwardLimits resolved = limits;
  if (resolved.max_context_len == 0) resolved.max_context_len = weights->config().max_context;
  if (resolved.max_logit_rows == 0) resolved.max_logit_rows = resolved.max_num_seqs;
  if (resolved.max_num_tokens <= 0 || resolved.max_num_seqs <= 0 || resolved.max_context_len <= 0 ||
      resolved.max_logit_rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ForwardLimits: every limit must be positive (max_num_tokens ", resolved.max_num_tokens,
        ", max_num_seqs ", resolved.max_num_seqs, ", max_context_len ", resolved.max_context_len,
        ", max_logit_rows ", resolved.max_logit_rows, ")"));
  }
  std::unique_ptr<LlamaModel> model(new LlamaModel(weights, resolved, block_size, kv_dtype, comm));
  KVSERVE_RETURN_IF_ERROR(model->AllocateRunState());
  return model;
}

LlamaModel::LlamaModel(const DeviceWeights* weights, const ForwardLimits& limits,
                       int32_t block_size, KvDtype kv_dtype, Communicator* comm)
    : weights_(weights),
      backend_(weights->backend()),
      comm_(comm),
      limits_(limits),
      block_size_(block_size),
      max_blocks_per_seq_((limits.max_context_len + block_size - 1) / block_size),
      kv_dtype_(kv_dtype),
      rope_(ToKernelRope(weights->config())) {}

absl::Status LlamaModel::AllocateRunState() {
  const ModelConfig& c = config();
  const int64_t T = limits_.max_num_tokens;
  const int64_t R = limits_.max_logit_rows;
  const int64_t S = limits_.max_num_seqs;
  auto allocate = [&](int64_t bytes, const char* what) -> absl::StatusOr<void*> {
    absl::StatusOr<DeviceBuffer> buffer =
        DeviceBuffer::Allocate(backend_, static_cast<size_t>(bytes), what);
    if (!buffer.ok()) return buffer.status();
    activation_bytes_ += bytes;
    void* data = buffer->data();
    buffers_.push_back(*std::move(buffer));
    return data;
  };
  const TensorShard& shard = weights_->shard();
  const int64_t q_dim = shard.q_dim();
  const int64_t kv_dim = shard.kv_dim();
  const int64_t ffn = shard.intermediate_size;
  struct FloatBuffer {
    float** field;
    int64_t floats;
  };
  RunState& s = state_;
  for (const FloatBuffer& b :
       {FloatBuffer{&s.residual, T * c.hidden_size}, FloatBuffer{&s.normed, T * c.hidden_size},
        FloatBuffer{&s.delta, T * c.hidden_size}, FloatBuffer{&s.q, T * q_dim},
        FloatBuffer{&s.k, T * kv_dim}, FloatBuffer{&s.v, T * kv_dim},
        FloatBuffer{&s.attn, T * q_dim}, FloatBuffer{&s.gate, T * ffn}, FloatBuffer{&s.up, T * ffn},
        FloatBuffer{&s.last, R * c.hidden_size}, FloatBuffer{&s.logits, R * c.vocab_size}}) {
    KVSERVE_ASSIGN_OR_RETURN(void* data,
                             allocate(b.floats * int64_t{sizeof(float)}, "activations"));
    *b.field = static_cast<float*>(data);
  }
  KVSERVE_ASSIGN_OR_RETURN(void* greedy, allocate(R * int64_t{sizeof(int32_t)}, "activations"));
  s.greedy = static_cast<int32_t*>(greedy);

  const MetadataLayout layout(T, S, R, max_blocks_per_seq_);
  KVSERVE_ASSIGN_OR_RETURN(void* metadata,
                           allocate(layout.total * int64_t{sizeof(int32_t)}, "metadata"));
  auto* base = static_cast<int32_t*>(metadata);
  s.token_ids = base + layout.token_ids;
  s.positions = base + layout.positions;
  s.slot_mapping = base + layout.slot_mapping;
  s.query_start = base + layout.query_start;
  s.context_lens = base + layout.context_lens;
  s.logit_rows = base + layout.logit_rows;
  s.block_tables = base + layout.block_tables;
  staging_.assign(layout.total, 0);

  const kernels::AttentionShape shape{.max_num_tokens = limits_.max_num_tokens,
                                      .max_num_seqs = limits_.max_num_seqs,
                                      .max_context_len = limits_.max_context_len,
                                      .num_heads = shard.num_heads,
                                      .num_kv_heads = shard.num_kv_heads,
                                      .head_dim = c.head_dim,
                                      .block_size = block_size_};
  s.attention_workspace_bytes = backend_->AttentionWorkspaceBytes(shape);
  absl::StatusOr<void*> workspace =
      allocate(static_cast<int64_t>(s.attention_workspace_bytes), "attention workspace");
  if (!workspace.ok()) return workspace.status();
  s.attention_workspace = *workspace;
  const int64_t max_in = std::max<int64_t>({c.hidden_size, ffn, q_dim});
  if (!backend_->ReserveLinear(std::max(T, R), max_in)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of ", backend_->name(), " memory for the linear layers' scratch"));
  }
  host_greedy_.assign(R, 0);
  host_logits_.assign(R * c.vocab_size, 0.0f);
  return absl::OkStatus();
}

KvLayout LlamaModel::kv_layout() const {
  const ModelConfig& c = config();
  return KvLayout{.num_layers = c.num_layers,
                  .num_kv_heads_local = weights_->shard().num_kv_heads,
                  .block_size = block_size_,
                  .head_dim = c.head_dim,
                  .dtype = kv_dtype_};
}

absl::Status LlamaModel::ValidateBatch(const ForwardBatch& b, const KvPool& kv) const {
  const KvLayout& layout = kv.layout();
  const KvLayout want = kv_layout();
  if (layout.num_layers != want.num_layers ||
      layout.num_kv_heads_local != want.num_kv_heads_local ||
      layout.block_size != want.block_size || layout.head_dim != want.head_dim ||
      layout.dtype != want.dtype) {
    return absl::FailedPreconditionError("KV pool layout does not match the model's kv_layout()");
  }
  const int32_t T = b.num_tokens();
  const int32_t S = b.num_seqs();
  if (T > limits_.max_num_tokens) return BatchError(absl::StrCat(T, " tokens > max_num_tokens"));
  if (S > limits_.max_num_seqs) return BatchError(absl::StrCat(S, " seqs > max_num_seqs"));
  if (b.num_logit_rows() > limits_.max_logit_rows) {
    return BatchError(absl::StrCat(b.num_logit_rows(), " logit rows > max_logit_rows"));
  }
  if (b.positions.size() != b.token_ids.size() || b.slot_mapping.size() != b.token_ids.size()) {
    return BatchError("token_ids, positions and slot_mapping must have the same length");
  }
  if (b.query_start.size() != static_cast<size_t>(S) + 1 || b.query_start[0] != 0 ||
      b.query_start[S] > T) {
    return BatchError("query_start must have num_seqs + 1 entries from 0 to at most num_tokens");
  }
  if (b.max_blocks_per_seq <= 0 ||
      b.block_tables.size() != static_cast<size_t>(S) * b.max_blocks_per_seq) {
    return BatchError("block_tables must be [num_seqs, max_blocks_per_seq]");
  }
  const int64_t max_context = std::min<int64_t>(
      limits_.max_context_len, static_cast<int64_t>(b.max_blocks_per_seq) * block_size_);
  for (int32_t s = 0; s < S; ++s) {
    const int32_t n = b.query_start[s + 1] - b.query_start[s];
    if (n < 0 || n > b.context_lens[s] || b.context_lens[s] > max_context) {
      return BatchError(absl::StrCat("sequence ", s, ": ", n, " new tokens, context length ",
                                     b.context_lens[s], ", limit ", max_context));
    }
  }
  for (int32_t id : b.token_ids) {
    if (id < 0 || id >= config().vocab_size) return BatchError(absl::StrCat("token id ", id));
  }
  // Slots and block ids index the pool directly; a bad one would write or read out of bounds.
  const int64_t num_slots = static_cast<int64_t>(kv.num_blocks()) * block_size_;
  for (int32_t slot : b.slot_mapping) {
    if (slot < -1 || slot >= num_slots) return BatchError(absl::StrCat("slot ", slot));
  }
  for (int32_t block : b.block_tables) {
    if (block < 0 || block >= kv.num_blocks()) return BatchError(absl::StrCat("block id ", block));
  }
  for (int32_t row : b.logit_rows) {
    if (row < 0 || row >= T) return BatchError(absl::StrCat("logit row ", row));
  }
  return absl::OkStatus();
}

void LlamaModel::UploadMetadata(const ForwardBatch& b, const StepShape& shape) {
  const MetadataLayout layout(limits_.max_num_tokens, limits_.max_num_seqs, limits_.max_logit_rows,
                              max_blocks_per_seq_);
  int32_t* out = staging_.data();
  const int32_t T = b.num_tokens();
  const int32_t S = b.num_seqs();
  const int32_t R = b.num_logit_rows();
  std::copy(b.token_ids.begin(), b.token_ids.end(), out + layout.token_ids);
  std::copy(b.positions.begin(), b.positions.end(), out + layout.positions);
  std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), out + layout.slot_mapping);
  out[layout.query_start] = 0;
  std::copy(b.query_start.begin(), b.query_start.end(), out + layout.query_start);
  std::copy(b.context_lens.begin(), b.context_lens.end(), out + layout.context_lens);
  std::copy(b.logit_rows.begin(), b.logit_rows.end(), out + layout.logit_rows);
  const int32_t stride = shape.block_table_stride;
  int32_t* tables = out + layout.block_tables;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t* row = b.block_tables.data() + static_cast<int64_t>(s) * b.max_blocks_per_seq;
    std::copy(row, row + std::min(stride, b.max_blocks_per_seq), tables + int64_t{s} * stride);
  }
  // A graph step of shape.num_seqs > S: each missing sequence is one padding token (never
  // written: slot -1) that attends to position 0 of the null block.
  for (int32_t t = T; t < shape.num_tokens; ++t) {
    out[layout.token_ids + t] = 0;
    out[layout.positions + t] = 0;
    out[layout.slot_mapping + t] = -1;
  }
  for (int32_t s = S; s < shape.num_seqs; ++s) {
    out[layout.query_start + s + 1] = out[layout.query_start + s] + 1;
    out[layout.context_lens + s] = 1;
    tables[int64_t{s} * stride] = 0;
  }
  for (int32_t r = R; r < shape.num_logit_rows; ++r) out[layout.logit_rows + r] = r;
  const int64_t used = layout.block_tables + int64_t{shape.num_seqs} * stride;
  backend_->CopyToDevice(state_.token_ids, staging_.data(), used * sizeof(int32_t));
}

namespace {

kernels::LinearParams LinearOf(const float* x, const WeightView& w, const float* bias, float* y,
                               int32_t num_tokens) {
  return {.x = x,
          .w = w.data,
          .bias = bias,
          .y = y,
          .num_tokens = num_tokens,
          .in_features = static_cast<int32_t>(w.cols),
          .out_features = static_cast<int32_t>(w.rows),
          .w_dtype = w.dtype,
          .w_packed = w.packed};
}

}  // namespace

void LlamaModel::Linear(const float* x, const WeightView& w, const float* bias, float* y,
                        int32_t num_tokens) {
  backend_->Linear(LinearOf(x, w, bias, y, num_tokens));
}

// normed -> q, k, v -> cache -> attention over the paged cache -> delta = attn Wo^T, summed
// over the ranks (each holds its heads: q, k, v, attn and Wo's columns are the shard's).
void LlamaModel::Attention(const StepShape& shape, const DeviceLayer& layer, int32_t layer_index,
                           KvPool& kv) {
  const ModelConfig& c = config();
  const TensorShard& shard = weights_->shard();
  const int32_t T = shape.num_tokens;
  RunState& s = state_;
  const kernels::LinearParams qkv[] = {LinearOf(s.normed, layer.wq, layer.bq, s.q, T),
                                       LinearOf(s.normed, layer.wk, layer.bk, s.k, T),
                                       LinearOf(s.normed, layer.wv, layer.bv, s.v, T)};
  backend_->LinearSameInput(qkv, 3);
  backend_->Rope({.q = s.q,
                  .k = s.k,
                  .positions = s.positions,
                  .num_tokens = T,
                  .num_heads = shard.num_heads,
                  .num_kv_heads = shard.num_kv_heads,
                  .config = rope_});
  const kernels::PagedKvView cache = kv.Layer(layer_index);
  backend_->WriteKv(
      {.k = s.k, .v = s.v, .slot_mapping = s.slot_mapping, .num_tokens = T, .cache = cache});
  backend_->PagedAttention({.q = s.q,
                            .out = s.attn,
                            .query_start = s.query_start,
                            .context_lens = s.context_lens,
                            .block_tables = s.block_tables,
                            .num_tokens = T,
                            .num_seqs = shape.num_seqs,
                            .num_heads = shard.num_heads,
                            .max_blocks_per_seq = shape.block_table_stride,
                            .max_query_len = shape.max_query_len,
                            .max_context_len = shape.max_context_len,
                            .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                            .cache = cache,
                            .workspace = s.attention_workspace,
                            .workspace_bytes = s.attention_workspace_bytes});
  Linear(s.attn, layer.wo, nullptr, s.delta, T);
  AllReduce(s.delta, T);
}

// normed -> delta = (silu(normed Wg^T) * normed Wu^T) Wd^T, summed over the ranks.
void LlamaModel::Mlp(int32_t num_tokens, const DeviceLayer& layer) {
  RunState& s = state_;
  const kernels::LinearParams gate_up[] = {
      LinearOf(s.normed, layer.w_gate, nullptr, s.gate, num_tokens),
      LinearOf(s.normed, layer.w_up, nullptr, s.up, num_tokens)};
  backend_->LinearSameInput(gate_up, 2);
  backend_->SiluAndMul({.gate = s.gate,
                        .up = s.up,
                        .out = s.gate,
                        .num_tokens = num_tokens,
                        .intermediate = weights_->shard().intermediate_size});
  Linear(s.gate, layer.w_down, nullptr, s.delta, num_tokens);
  AllReduce(s.delta, num_tokens);
}

// The row-parallel layers (o_proj, down_proj) leave each rank with its heads' (its MLP slice's)
// share of the output; the sum over ranks is the layer's output. Llama-family models have no
// bias on these layers (one would be added on rank 0 only, before the sum).
void LlamaModel::AllReduce(float* delta, int32_t num_tokens) {
  if (comm_ == nullptr || weights_->shard().size == 1 || !comm_status_.ok()) return;
  comm_status_ =
      comm_->AllReduceSum(delta, int64_t{num_tokens} * config().hidden_size, kernels::DType::kF32);
}

void LlamaModel::Compute(const StepShape& shape, KvPool& kv) {
  const ModelConfig& c = config();
  const int32_t T = shape.num_tokens;
  const int32_t R = shape.num_logit_rows;
  RunState& s = state_;
  const WeightView& embedding = weights_->embedding();
  backend_->Embedding({.ids = s.token_ids,
                       .table = embedding.data,
                       .out = s.residual,
                       .num_tokens = T,
                       .vocab = c.vocab_size,
                       .hidden = c.hidden_size,
                       .table_dtype = embedding.dtype,
                       .table_packed = embedding.packed});
  // The residual add of each sub-layer output (delta) is fused into the next norm.
  auto add_and_norm = [&](const float* weight, bool add) {
    if (add) {
      backend_->AddRmsNorm({.residual = s.residual,
                            .x = s.delta,
                            .weight = weight,
                            .out = s.normed,
                            .num_tokens = T,
                            .hidden = c.hidden_size,
                            .eps = c.rms_norm_eps});
    } else {
      backend_->RmsNorm({.x = s.residual,
                         .weight = weight,
                         .out = s.normed,
                         .num_tokens = T,
                         .hidden = c.hidden_size,
                         .eps = c.rms_norm_eps});
    }
  };
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const DeviceLayer& layer = weights_->layer(l);
    add_and_norm(layer.attn_norm, /*add=*/l > 0);
    Attention(shape, layer, l, kv);
    add_and_norm(layer.ffn_norm, /*add=*/true);
    Mlp(T, layer);
  }
  add_and_norm(weights_->final_norm(), /*add=*/true);
  if (R == 0) return;
  backend_->GatherRows({.src = s.normed,
                        .rows = s.logit_rows,
                        .dst = s.last,
                        .src_rows = T,
                        .num_rows = R,
                        .cols = c.hidden_size});
  Linear(s.last, weights_->output(), nullptr, s.logits, R);
  backend_->Argmax({.logits = s.logits, .ids = s.greedy, .num_rows = R, .vocab = c.vocab_size});
}

kernels::Graph* LlamaModel::DecodeGraphFor(const ForwardBatch& b, const KvPool& kv,
                                           StepShape* shape) {
  const int32_t S = b.num_seqs();
  if (graphs_.empty() || &kv != graph_pool_ || S == 0 || b.num_tokens() != S ||
      b.num_logit_rows() != S) {
    return nullptr;
  }
  for (int32_t s = 0; s < S; ++s) {
    if (b.query_start[s + 1] != s + 1 || b.logit_rows[s] != s) return nullptr;
  }
  auto bucket = graphs_.lower_bound(S);
  if (bucket == graphs_.end()) return nullptr;
  const int32_t B = bucket->first;
  *shape = StepShape{.num_tokens = B,
                     .num_seqs = B,
                     .num_logit_rows = B,
                     .max_query_len = 1,
                     .max_context_len = limits_.max_context_len,
                     .block_table_stride = max_blocks_per_seq_};
  return bucket->second.get();
}

absl::Status LlamaModel::ForwardOnDevice(const ForwardBatch& b, KvPool& kv) {
  KVSERVE_RETURN_IF_ERROR(ValidateBatch(b, kv));
  last_logit_rows_ = b.num_logit_rows();
  last_num_tokens_ = b.num_tokens();
  if (b.num_tokens() == 0) return absl::OkStatus();
  StepShape shape;
  if (kernels::Graph* graph = DecodeGraphFor(b, kv, &shape); graph != nullptr) {
    UploadMetadata(b, shape);
    if (!graph->Replay()) return absl::InternalError("replaying a decode graph failed");
    return comm_status_;
  }
  shape = StepShape{.num_tokens = b.num_tokens(),
                    .num_seqs = b.num_seqs(),
                    .num_logit_rows = b.num_logit_rows(),
                    .max_query_len = 0,
                    .max_context_len = 0,
                    .block_table_stride = 1};
  for (int32_t seq = 0; seq < b.num_seqs(); ++seq) {
    shape.max_query_len =
        std::max(shape.max_query_len, b.query_start[seq + 1] - b.query_start[seq]);
    shape.max_context_len = std::max(shape.max_context_len, b.context_lens[seq]);
  }
  // Eager steps pass the block tables cut to the longest sequence of the step, not the
  // context limit: fewer bytes to copy, and the kernels' rows stay short.
  shape.block_table_stride = std::max(1, (shape.max_context_len + block_size_ - 1) / block_size_);
  UploadMetadata(b, shape);
  Compute(shape, kv);
  return comm_status_;
}

absl::StatusOr<absl::Span<const int32_t>> LlamaModel::GreedyTokens() {
  const size_t R = static_cast<size_t>(last_logit_rows_);
  if (R > 0) backend_->CopyToHost(host_greedy_.data(), state_.greedy, R * sizeof(int32_t));
  if (!backend_->Synchronize()) return absl::InternalError("the backend reported an error");
  return absl::Span<const int32_t>(host_greedy_.data(), R);
}

absl::StatusOr<absl::Span<float>> LlamaModel::LogitRows(absl::Span<const int32_t> rows) {
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  for (size_t i = 0; i < rows.size(); ++i) {
    backend_->CopyToHost(host_logits_.data() + i * vocab, state_.logits + rows[i] * vocab,
                         vocab * sizeof(float));
  }
  if (!backend_->Synchronize()) return absl::InternalError("the backend reported an error");
  return absl::Span<float>(host_logits_.data(), rows.size() * vocab);
}

absl::StatusOr<absl::Span<const float>> LlamaModel::TokenLogits(int32_t first_token,
                                                                int32_t count) {
  if (count < 0 || count > limits_.max_logit_rows || first_token < 0 ||
      first_token + count > last_num_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TokenLogits: tokens [", first_token, ", ", first_token + count, ") of a step of ",
        last_num_tokens_, " tokens, at most ", limits_.max_logit_rows, " at a time"));
  }
  const ModelConfig& c = config();
  const size_t values = static_cast<size_t>(count) * c.vocab_size;
  if (count > 0) {
    // state_.normed holds the final norm of every token of the step (Compute).
    Linear(state_.normed + int64_t{first_token} * c.hidden_size, weights_->output(), nullptr,
           state_.logits, count);
    backend_->CopyToHost(host_logits_.data(), state_.logits, values * sizeof(float));
  }
  if (!backend_->Synchronize()) return absl::InternalError("the backend reported an error");
  return absl::Span<const float>(host_logits_.data(), values);
}

absl::StatusOr<absl::Span<const float>> LlamaModel::Forward(const ForwardBatch& b, KvPool& kv) {
  KVSERVE_RETURN_IF_ERROR(ForwardOnDevice(b, kv));
  const size_t count = static_cast<size_t>(last_logit_rows_) * config().vocab_size;
  if (count > 0) backend_->CopyToHost(host_logits_.data(), state_.logits, count * sizeof(float));
  if (!backend_->Synchronize()) return absl::InternalError("the backend reported an error");
  return absl::Span<const float>(host_logits_.data(), count);
}

absl::StatusOr<int32_t> LlamaModel::CaptureDecodeGraphs(KvPool& kv,
                                                        absl::Span<const int32_t> batch_sizes) {
  graphs_.clear();
  graph_pool_ = &kv;
  ForwardBatch empty;
  empty.max_blocks_per_seq = max_blocks_per_seq_;
  for (int32_t size : batch_sizes) {
    if (size <= 0 || size > limits_.max_num_seqs || size > limits_.max_logit_rows ||
        size > limits_.max_num_tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat("decode graph batch size ", size, " is outside the model's limits"));
    }
    const StepShape shape{.num_tokens = size,
                          .num_seqs = size,
                          .num_logit_rows = size,
                          .max_query_len = 1,
                          .max_context_len = limits_.max_context_len,
                          .block_table_stride = max_blocks_per_seq_};
    UploadMetadata(empty, shape);
    Compute(shape, kv);  // eager once: libraries set up their workspaces outside the capture
    if (!comm_status_.ok()) return comm_status_;
    if (!backend_->Synchronize()) return absl::InternalError("a decode warm-up step failed");
    std::unique_ptr<kernels::Graph> graph =
        backend_->Capture([this, shape, &kv] { Compute(shape, kv); });
    if (graph == nullptr) break;
    graphs_[size] = std::move(graph);
  }
  if (!backend_->Synchronize()) return absl::InternalError("capturing decode graphs failed");
  return num_decode_graphs();
}

}  // namespace kvserve
