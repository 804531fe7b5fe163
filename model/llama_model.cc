#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

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

// The bias pointer the kernels take: null when the layer has none (empty vector).
const float* BiasOrNull(const std::vector<float>& bias) {
  return bias.empty() ? nullptr : bias.data();
}

absl::Status BatchError(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("ForwardBatch: ", what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const ModelWeights* weights,
                                                               kernels::Backend* backend,
                                                               const ForwardLimits& limits,
                                                               int32_t block_size) {
  if (weights == nullptr || backend == nullptr) {
    return absl::InvalidArgumentError("LlamaModel: weights and backend must be non-null");
  }
  if (absl::Status status = weights->Validate(); !status.ok()) return status;
  if (absl::Status status = ValidateBlockSize(block_size); !status.ok()) return status;
  ForwardLimits resolved = limits;
  if (resolved.max_context_len == 0) resolved.max_context_len = weights->config.max_context;
  if (resolved.max_logit_rows == 0) resolved.max_logit_rows = resolved.max_num_seqs;
  if (resolved.max_num_tokens <= 0 || resolved.max_num_seqs <= 0 || resolved.max_context_len <= 0 ||
      resolved.max_logit_rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ForwardLimits: every limit must be positive (max_num_tokens ", resolved.max_num_tokens,
        ", max_num_seqs ", resolved.max_num_seqs, ", max_context_len ", resolved.max_context_len,
        ", max_logit_rows ", resolved.max_logit_rows, ")"));
  }
  return std::unique_ptr<LlamaModel>(new LlamaModel(weights, backend, resolved, block_size));
}

LlamaModel::LlamaModel(const ModelWeights* weights, kernels::Backend* backend,
                       const ForwardLimits& limits, int32_t block_size)
    : weights_(weights),
      backend_(backend),
      limits_(limits),
      block_size_(block_size),
      rope_(ToKernelRope(weights->config)) {
  const ModelConfig& c = weights->config;
  const size_t tokens = limits.max_num_tokens;
  const size_t rows = limits.max_logit_rows;
  state_.residual.resize(tokens * c.hidden_size);
  state_.normed.resize(tokens * c.hidden_size);
  state_.delta.resize(tokens * c.hidden_size);
  state_.q.resize(tokens * c.num_heads * c.head_dim);
  state_.k.resize(tokens * c.num_kv_heads * c.head_dim);
  state_.v.resize(tokens * c.num_kv_heads * c.head_dim);
  state_.attn.resize(tokens * c.num_heads * c.head_dim);
  state_.gate.resize(tokens * c.intermediate_size);
  state_.up.resize(tokens * c.intermediate_size);
  state_.last.resize(rows * c.hidden_size);
  state_.logits.resize(rows * c.vocab_size);
  const kernels::AttentionShape shape{.max_num_tokens = limits.max_num_tokens,
                                      .max_num_seqs = limits.max_num_seqs,
                                      .max_context_len = limits.max_context_len,
                                      .num_heads = c.num_heads,
                                      .num_kv_heads = c.num_kv_heads,
                                      .head_dim = c.head_dim,
                                      .block_size = block_size};
  state_.attention_workspace.resize(backend->AttentionWorkspaceBytes(shape));
}

KvLayout LlamaModel::kv_layout() const {
  const ModelConfig& c = weights_->config;
  return KvLayout{.num_layers = c.num_layers,
                  .num_kv_heads_local = c.num_kv_heads,
                  .block_size = block_size_,
                  .head_dim = c.head_dim,
                  .dtype = KvDtype::kF32};
}

absl::Status LlamaModel::ValidateBatch(const ForwardBatch& b, const HostKvPool& kv) const {
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

void LlamaModel::Linear(const float* x, const std::vector<float>& w, const float* bias, float* y,
                        int32_t num_tokens, int32_t in_features, int32_t out_features) {
  backend_->Linear({.x = x,
                    .w = w.data(),
                    .bias = bias,
                    .y = y,
                    .num_tokens = num_tokens,
                    .in_features = in_features,
                    .out_features = out_features});
}

// normed -> q, k, v -> cache -> attention over the paged cache -> delta = attn Wo^T.
void LlamaModel::Attention(const ForwardBatch& b, const LayerWeights& layer, int32_t layer_index,
                           HostKvPool& kv) {
  const ModelConfig& c = config();
  const int32_t T = b.num_tokens();
  const int32_t q_dim = c.num_heads * c.head_dim;
  const int32_t kv_dim = c.num_kv_heads * c.head_dim;
  RunState& s = state_;
  Linear(s.normed.data(), layer.wq, BiasOrNull(layer.bq), s.q.data(), T, c.hidden_size, q_dim);
  Linear(s.normed.data(), layer.wk, BiasOrNull(layer.bk), s.k.data(), T, c.hidden_size, kv_dim);
  Linear(s.normed.data(), layer.wv, BiasOrNull(layer.bv), s.v.data(), T, c.hidden_size, kv_dim);
  backend_->Rope({.q = s.q.data(),
                  .k = s.k.data(),
                  .positions = b.positions.data(),
                  .num_tokens = T,
                  .num_heads = c.num_heads,
                  .num_kv_heads = c.num_kv_heads,
                  .config = rope_});
  const kernels::PagedKvView cache = kv.Layer(layer_index);
  backend_->WriteKv({.k = s.k.data(),
                     .v = s.v.data(),
                     .slot_mapping = b.slot_mapping.data(),
                     .num_tokens = T,
                     .cache = cache});
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  for (int32_t seq = 0; seq < b.num_seqs(); ++seq) {
    max_query_len = std::max(max_query_len, b.query_start[seq + 1] - b.query_start[seq]);
    max_context_len = std::max(max_context_len, b.context_lens[seq]);
  }
  backend_->PagedAttention({.q = s.q.data(),
                            .out = s.attn.data(),
                            .query_start = b.query_start.data(),
                            .context_lens = b.context_lens.data(),
                            .block_tables = b.block_tables.data(),
                            .num_tokens = T,
                            .num_seqs = b.num_seqs(),
                            .num_heads = c.num_heads,
                            .max_blocks_per_seq = b.max_blocks_per_seq,
                            .max_query_len = max_query_len,
                            .max_context_len = max_context_len,
                            .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                            .cache = cache,
                            .workspace = s.attention_workspace.data(),
                            .workspace_bytes = s.attention_workspace.size()});
  Linear(s.attn.data(), layer.wo, nullptr, s.delta.data(), T, q_dim, c.hidden_size);
}

// normed -> delta = (silu(normed Wg^T) * normed Wu^T) Wd^T.
void LlamaModel::Mlp(int32_t num_tokens, const LayerWeights& layer) {
  const ModelConfig& c = config();
  RunState& s = state_;
  Linear(s.normed.data(), layer.w_gate, nullptr, s.gate.data(), num_tokens, c.hidden_size,
         c.intermediate_size);
  Linear(s.normed.data(), layer.w_up, nullptr, s.up.data(), num_tokens, c.hidden_size,
         c.intermediate_size);
  backend_->SiluAndMul({.gate = s.gate.data(),
                        .up = s.up.data(),
                        .out = s.gate.data(),
                        .num_tokens = num_tokens,
                        .intermediate = c.intermediate_size});
  Linear(s.gate.data(), layer.w_down, nullptr, s.delta.data(), num_tokens, c.intermediate_size,
         c.hidden_size);
}

absl::StatusOr<absl::Span<const float>> LlamaModel::Forward(const ForwardBatch& b, HostKvPool& kv) {
  if (absl::Status status = ValidateBatch(b, kv); !status.ok()) return status;
  const ModelConfig& c = config();
  const int32_t T = b.num_tokens();
  const int32_t R = b.num_logit_rows();
  RunState& s = state_;
  if (T == 0) return absl::Span<const float>(s.logits.data(), 0);

  backend_->Embedding({.ids = b.token_ids.data(),
                       .table = weights_->token_embedding.data(),
                       .out = s.residual.data(),
                       .num_tokens = T,
                       .vocab = c.vocab_size,
                       .hidden = c.hidden_size});
  // The residual add of each sub-layer output (delta) is fused into the next norm.
  auto add_and_norm = [&](const std::vector<float>& weight, bool add) {
    if (add) {
      backend_->AddRmsNorm({.residual = s.residual.data(),
                            .x = s.delta.data(),
                            .weight = weight.data(),
                            .out = s.normed.data(),
                            .num_tokens = T,
                            .hidden = c.hidden_size,
                            .eps = c.rms_norm_eps});
    } else {
      backend_->RmsNorm({.x = s.residual.data(),
                         .weight = weight.data(),
                         .out = s.normed.data(),
                         .num_tokens = T,
                         .hidden = c.hidden_size,
                         .eps = c.rms_norm_eps});
    }
  };
  for (int32_t l = 0; l < c.num_layers; ++l) {
    const LayerWeights& layer = weights_->layers[l];
    add_and_norm(layer.attn_norm, /*add=*/l > 0);
    Attention(b, layer, l, kv);
    add_and_norm(layer.ffn_norm, /*add=*/true);
    Mlp(T, layer);
  }
  add_and_norm(weights_->final_norm, /*add=*/true);

  if (R == 0) return absl::Span<const float>(s.logits.data(), 0);
  backend_->GatherRows({.src = s.normed.data(),
                        .rows = b.logit_rows.data(),
                        .dst = s.last.data(),
                        .src_rows = T,
                        .num_rows = R,
                        .cols = c.hidden_size});
  Linear(s.last.data(), weights_->output_weight(), nullptr, s.logits.data(), R, c.hidden_size,
         c.vocab_size);
  if (!backend_->Synchronize()) return absl::InternalError("backend reported an error");
  return absl::Span<const float>(s.logits.data(), static_cast<size_t>(R) * c.vocab_size);
}

}  // namespace kvserve
