#include "model/model_config.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve {

absl::Status ModelConfig::Validate() const {
  if (architecture != "llama" && architecture != "qwen2") {
    return absl::InvalidArgumentError(
        absl::StrCat("architecture '", architecture, "': want llama or qwen2"));
  }
  for (auto [field, value] :
       {std::pair{"num_layers", num_layers}, std::pair{"hidden_size", hidden_size},
        std::pair{"num_heads", num_heads}, std::pair{"num_kv_heads", num_kv_heads},
        std::pair{"head_dim", head_dim}, std::pair{"intermediate_size", intermediate_size},
        std::pair{"vocab_size", vocab_size}, std::pair{"max_context", max_context}}) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, " = ", value, ": must be positive"));
    }
  }
  if (num_heads % num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_heads = ", num_heads, " is not a multiple of num_kv_heads = ", num_kv_heads));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim = ", head_dim, ": RoPE needs an even head dimension"));
  }
  if (!(rope_theta > 0.0f) || !std::isfinite(rope_theta)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_theta = ", rope_theta, ": must be > 0"));
  }
  if (!(rms_norm_eps > 0.0f) || !std::isfinite(rms_norm_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm_eps = ", rms_norm_eps, ": must be > 0"));
  }
  if (rope_scaling.type != RopeScaling::Type::kNone &&
      (!(rope_scaling.factor > 0.0f) || !std::isfinite(rope_scaling.factor))) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling.factor = ", rope_scaling.factor, ": must be > 0"));
  }
  if (rope_scaling.type == RopeScaling::Type::kLlama3 &&
      (rope_scaling.original_max_position <= 0 ||
       !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
       !(rope_scaling.low_freq_factor > 0.0f))) {
    return absl::InvalidArgumentError(
        "rope_scaling (llama3): want original_max_position > 0 and "
        "high_freq_factor > low_freq_factor > 0");
  }
  if (bos_token_id < -1 || bos_token_id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("bos_token_id = ", bos_token_id,
                                                   " is outside the vocabulary of ", vocab_size,
                                                   " (-1: none)"));
  }
  for (int32_t eos : eos_token_ids) {
    if (eos < 0 || eos >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("eos_token_ids contains ", eos, ", outside the vocabulary of ", vocab_size));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve
