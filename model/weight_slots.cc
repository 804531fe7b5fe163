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

std::vector<WeightSlot> WeightSlots(ModelWeights* weights) {
  using Kind = WeightSlot::Kind;
  const ModelConfig& c = weights->config;
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  const int64_t ffn = c.intermediate_size;
  const int64_t vocab = c.vocab_size;
  std::vector<WeightSlot> slots;
  slots.push_back({Kind::kMatrix,
                   "token_embedding",
                   "token_embd.weight",
                   "model.embed_tokens.weight",
                   {vocab, hidden},
                   &weights->token_embedding});
  weights->layers.resize(c.num_layers);
  for (int32_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& l = weights->layers[i];
    const std::string name = absl::StrCat("layers.", i, ".");
    const std::string gguf = absl::StrCat("blk.", i, ".");
    const std::string hf = absl::StrCat("model.layers.", i, ".");
    auto add = [&](Kind kind, const char* field, const char* gguf_suffix, const char* hf_suffix,
                   std::vector<int64_t> shape, std::vector<float>* out) {
      slots.push_back(
          {kind, name + field, gguf + gguf_suffix, hf + hf_suffix, std::move(shape), out});
    };
    add(Kind::kNorm, "attn_norm", "attn_norm.weight", "input_layernorm.weight", {hidden},
        &l.attn_norm);
    add(Kind::kMatrix, "wq", "attn_q.weight", "self_attn.q_proj.weight", {q_dim, hidden}, &l.wq);
    add(Kind::kMatrix, "wk", "attn_k.weight", "self_attn.k_proj.weight", {kv_dim, hidden}, &l.wk);
    add(Kind::kMatrix, "wv", "attn_v.weight", "self_attn.v_proj.weight", {kv_dim, hidden}, &l.wv);
    if (c.attention_bias) {
      add(Kind::kBias, "bq", "attn_q.bias", "self_attn.q_proj.bias", {q_dim}, &l.bq);
      add(Kind::kBias, "bk", "attn_k.bias", "self_attn.k_proj.bias", {kv_dim}, &l.bk);
      add(Kind::kBias, "bv", "attn_v.bias", "self_attn.v_proj.bias", {kv_dim}, &l.bv);
    }
    add(Kind::kMatrix, "wo", "attn_output.weight", "self_attn.o_proj.weight", {hidden, q_dim},
        &l.wo);
    add(Kind::kNorm, "ffn_norm", "ffn_norm.weight", "post_attention_layernorm.weight", {hidden},
        &l.ffn_norm);
    add(Kind::kMatrix, "w_gate", "ffn_gate.weight", "mlp.gate_proj.weight", {ffn, hidden},
        &l.w_gate);
    add(Kind::kMatrix, "w_up", "ffn_up.weight", "mlp.up_proj.weight", {ffn, hidden}, &l.w_up);
    add(Kind::kMatrix, "w_down", "ffn_down.weight", "mlp.down_proj.weight", {hidden, ffn},
        &l.w_down);
  }
  slots.push_back({Kind::kNorm,
                   "final_norm",
                   "output_norm.weight",
                   "model.norm.weight",
                   {hidden},
                   &weights->final_norm});
  if (!c.tie_word_embeddings) {
    slots.push_back({Kind::kMatrix,
                     "lm_head",
                     "output.weight",
                     "lm_head.weight",
                     {vocab, hidden},
                     &weights->lm_head});
  }
  return slots;
}

}  // namespace kvserve
