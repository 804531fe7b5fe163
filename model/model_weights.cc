#include "model/model_weights.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

absl::Status CheckSize(const std::string& name, const std::vector<float>& tensor, int64_t want,
                       const ModelWeights& weights, int64_t cols = 0) {
  if (tensor.empty() && cols > 0) {
    if (auto it = weights.stored.find(name); it != weights.stored.end()) {
      const int64_t want_bytes = kernels::RowBytes(it->second.dtype, cols) * (want / cols);
      if (cols % kernels::GetDTypeInfo(it->second.dtype).block_elements != 0 ||
          it->second.num_bytes != want_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": ", it->second.num_bytes, " bytes of ",
                         kernels::DTypeName(it->second.dtype), ", want ", want_bytes));
      }
      return absl::OkStatus();
    }
  }
  if (static_cast<int64_t>(tensor.size()) != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", tensor.size(), " floats, want ", want));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ModelWeights::Validate() const {
  KVSERVE_RETURN_IF_ERROR(config.Validate());
  KVSERVE_ASSIGN_OR_RETURN(TensorShard local, shard());
  const int64_t hidden = config.hidden_size;
  const int64_t q_dim = local.q_dim();
  const int64_t kv_dim = local.kv_dim();
  const int64_t ffn = local.intermediate_size;
  const int64_t vocab = config.vocab_size;
  if (static_cast<int64_t>(layers.size()) != config.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers: ", layers.size(), " layers, want ", config.num_layers));
  }
  KVSERVE_RETURN_IF_ERROR(
      CheckSize("token_embedding", token_embedding, vocab * hidden, *this, hidden));
  KVSERVE_RETURN_IF_ERROR(CheckSize("final_norm", final_norm, hidden, *this));
  if (absl::Status s =
          CheckSize("lm_head", lm_head, config.tie_word_embeddings ? 0 : vocab * hidden, *this,
                    config.tie_word_embeddings ? 0 : hidden);
      !s.ok()) {
    return s;
  }
  const int64_t bias_q = config.attention_bias ? q_dim : 0;
  const int64_t bias_kv = config.attention_bias ? kv_dim : 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerWeights& l = layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    // (name, tensor, elements, columns of a matrix or 0)
    for (auto [name, tensor, want, cols] : {
             std::tuple{"attn_norm", &l.attn_norm, hidden, int64_t{0}},
             std::tuple{"wq", &l.wq, q_dim * hidden, hidden},
             std::tuple{"wk", &l.wk, kv_dim * hidden, hidden},
             std::tuple{"wv", &l.wv, kv_dim * hidden, hidden},
             std::tuple{"bq", &l.bq, bias_q, int64_t{0}},
             std::tuple{"bk", &l.bk, bias_kv, int64_t{0}},
             std::tuple{"bv", &l.bv, bias_kv, int64_t{0}},
             std::tuple{"wo", &l.wo, hidden * q_dim, q_dim},
             std::tuple{"ffn_norm", &l.ffn_norm, hidden, int64_t{0}},
             std::tuple{"w_gate", &l.w_gate, ffn * hidden, hidden},
             std::tuple{"w_up", &l.w_up, ffn * hidden, hidden},
             std::tuple{"w_down", &l.w_down, hidden * ffn, ffn},
         }) {
      KVSERVE_RETURN_IF_ERROR(CheckSize(p + name, *tensor, want, *this, cols));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve
