#include "model/weight_slots.h"

#include "absl/strings/str_cat.h"

namespace kvserve {

absl::Status CheckTensorCount(const ModelConfig& config, size_t num_tensors) {
  constexpr int64_t kTensorsPerLayer = 9;  // 2 norms, 4 attention and 3 MLP matrices
  const int64_t want = kTensorsPerLayer * static_cast<int64_t>(config.num_layers) + 2;
  if (config.num_layers < 0 || static_cast<int64_t>(num_tensors) < want) {
    return absl::InvalidArgumentError(absl::StrCat("config has ", config.num_layers,
                                                   " layers, needing at least ", want,
                                                   " tensors, but the file has ", num_tensors));
  }
  return absl::OkStatus();
}

std::vector<int64_t> WeightSlot::local_shape() const {
  if (shape.size() == 1) return {slice.num_cols};
  return {slice.num_rows, slice.num_cols};
}

std::vector<WeightSlot> WeightSlots(ModelWeights* weights) {
  using Kind = WeightSlot::Kind;
  const ModelConfig& c = weights->config;
  const TensorShard shard = *weights->shard();
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  const int64_t ffn = c.intermediate_size;
  const int64_t vocab = c.vocab_size;
  // The rank's part of each split dimension: [begin, begin + size) of q, kv or ffn.
  struct Range {
    int64_t begin, size;
  };
  const Range q{shard.first_q_row(), shard.q_dim()};
  const Range kv{shard.first_kv_row(), shard.kv_dim()};
  const Range mlp{shard.first_intermediate, shard.intermediate_size};
  auto whole = [](std::vector<int64_t> shape) {
    return shape.size() == 1 ? TensorSlice::Whole(1, shape[0])
                             : TensorSlice::Whole(shape[0], shape[1]);
  };
  auto rows = [](int64_t out, int64_t in, Range part) {  // column-parallel matrix
    return TensorSlice{out, in, part.begin, part.size, 0, in};
  };
  auto columns = [](int64_t out, int64_t in, Range part) {  // row-parallel matrix, or a bias
    return TensorSlice{out, in, 0, out, part.begin, part.size};
  };
  std::vector<WeightSlot> slots;
  slots.push_back({Kind::kMatrix,
                   "token_embedding",
                   "token_embd.weight",
                   "model.embed_tokens.weight",
                   {vocab, hidden},
                   whole({vocab, hidden}),
                   &weights->token_embedding});
  weights->layers.resize(c.num_layers);
  for (int32_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = weights->layers[i];
    const std::string name = absl::StrCat("layers.", i, ".");
    const std::string gguf = absl::StrCat("blk.", i, ".");
    const std::string hf = absl::StrCat("model.layers.", i, ".");
    auto add = [&](Kind kind, const char* field, const char* gguf_suffix, const char* hf_suffix,
                   std::vector<int64_t> shape, TensorSlice slice, std::vector<float>* out) {
      slots.push_back(
          {kind, name + field, gguf + gguf_suffix, hf + hf_suffix, std::move(shape), slice, out});
    };
    add(Kind::kNorm, "attn_norm", "attn_norm.weight", "input_layernorm.weight", {hidden},
        whole({hidden}), &l.attn_norm);
    add(Kind::kMatrix, "wq", "attn_q.weight", "self_attn.q_proj.weight", {q_dim, hidden},
        rows(q_dim, hidden, q), &l.wq);
    add(Kind::kMatrix, "wk", "attn_k.weight", "self_attn.k_proj.weight", {kv_dim, hidden},
        rows(kv_dim, hidden, kv), &l.wk);
    add(Kind::kMatrix, "wv", "attn_v.weight", "self_attn.v_proj.weight", {kv_dim, hidden},
        rows(kv_dim, hidden, kv), &l.wv);
    if (c.attention_bias) {
      add(Kind::kBias, "bq", "attn_q.bias", "self_attn.q_proj.bias", {q_dim}, columns(1, q_dim, q),
          &l.bq);
      add(Kind::kBias, "bk", "attn_k.bias", "self_attn.k_proj.bias", {kv_dim},
          columns(1, kv_dim, kv), &l.bk);
      add(Kind::kBias, "bv", "attn_v.bias", "self_attn.v_proj.bias", {kv_dim},
          columns(1, kv_dim, kv), &l.bv);
    }
    add(Kind::kMatrix, "wo", "attn_output.weight", "self_attn.o_proj.weight", {hidden, q_dim},
        columns(hidden, q_dim, q), &l.wo);
    add(Kind::kNorm, "ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight", {hidden},
        whole({hidden}), &l.ffn_norm);
    add(Kind::kMatrix, "w_gate", "ffn_gate.weight", "mlp.gate_proj.weight", {ffn, hidden},
        rows(ffn, hidden, mlp), &l.w_gate);
    add(Kind::kMatrix, "w_up", "ffn_up.weight", "mlp.up_proj.weight", {ffn, hidden},
        rows(ffn, hidden, mlp), &l.w_up);
    add(Kind::kMatrix, "w_down", "ffn_down.weight", "mlp.down_proj.weight", {hidden, ffn},
        columns(hidden, ffn, mlp), &l.w_down);
  }
  slots.push_back({Kind::kNorm,
                   "final_norm",
                   "output_norm.weight",
                   "model.norm.weight",
                   {hidden},
                   whole({hidden}),
                   &weights->final_norm});
  if (!c.tie_word_embeddings) {
    slots.push_back({Kind::kMatrix,
                     "lm_head",
                     "output.weight",
                     "lm_head.weight",
                     {vocab, hidden},
                     whole({vocab, hidden}),
                     &weights->lm_head});
  }
  return slots;
}

}  // namespace kvserve
