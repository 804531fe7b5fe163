#include "model/gguf_model.h"

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "model/dequantize.h"
#include "model/weight_slots.h"

namespace kvserve {
namespace {

// Reads an integer key into an int32 field; NOT_FOUND when absent and required.
absl::Status ReadInt32(const GgufFile& file, const std::string& key, bool required, int32_t* out) {
  if (!file.Has(key) && !required) return absl::OkStatus();
  KVSERVE_ASSIGN_OR_RETURN(int64_t value, file.GetInt(key));
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF metadata key '", key, "' = ", value, " does not fit in int32"));
  }
  *out = static_cast<int32_t>(value);
  return absl::OkStatus();
}

absl::Status ReadFloat(const GgufFile& file, const std::string& key, float* out) {
  if (!file.Has(key)) return absl::OkStatus();
  KVSERVE_ASSIGN_OR_RETURN(double value, file.GetFloat(key));
  *out = static_cast<float>(value);
  return absl::OkStatus();
}

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

// Collects the tensors to decode, checking names and shapes first so that nothing is
// allocated for a file that does not match its config.
class JobList {
 public:
  JobList(const GgufFile& file, ModelWeights* weights) : file_(file), weights_(weights) {}

  // Checks the slot's tensor (its whole stored shape), then reads the slot's part. With
  // `keep_stored`, a matrix of a block or 16-bit type the kernels take stays as stored
  // (weights->stored): a view into the file when the part is whole rows, a copy gathered row by
  // row when it is a column slice on block boundaries; a column slice off block boundaries is
  // decoded to fp32 instead (weights->decoded_for_shard). Everything else is decoded.
  absl::Status Add(const WeightSlot& slot, bool keep_stored) {
    const GgufTensorInfo* info = file_.FindTensor(slot.gguf_name);
    if (info == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF tensor '", slot.gguf_name, "' is missing"));
    }
    const std::vector<int64_t> dims(slot.shape.rbegin(), slot.shape.rend());  // ggml order
    if (info->dims != dims) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF tensor '", slot.gguf_name, "' has dims ",
                                                     DimsString(info->dims), ", want ",
                                                     DimsString(dims), " (ggml order)"));
    }
    const TensorSlice& part = slot.slice;
    const std::optional<kernels::DType> dtype = GgmlToDType(info->type);
    if (keep_stored && dtype && *dtype != kernels::DType::kF32) {
      const int64_t block_elements = kernels::GetDTypeInfo(*dtype).block_elements;
      if (part.cols % block_elements == 0 && part.whole_rows()) {
        const int64_t row_bytes = kernels::RowBytes(*dtype, part.cols);
        weights_->stored[slot.name] = StoredMatrix{*dtype, info->data + part.row_begin * row_bytes,
                                                   part.num_rows * row_bytes};
        return absl::OkStatus();
      }
      if (part.cols % block_elements == 0 && part.OnBlockBoundaries(block_elements)) {
        gathered_.push_back(GatherSliceBytes(info->data, *dtype, part));
        weights_->stored[slot.name] = StoredMatrix{*dtype, gathered_.back().data(),
                                                   static_cast<int64_t>(gathered_.back().size())};
        file_.DropPages(info->data, info->num_bytes);  // only the gathered copy is used
        return absl::OkStatus();
      }
      weights_->decoded_for_shard.push_back(slot.name);
      to_drop_.push_back(info);
    }
    total_floats_ += part.num_elements();
    jobs_.push_back({slot.gguf_name, info->type, info->data, info->num_bytes, info->num_elements(),
                     slot.out, part.whole() ? std::nullopt : std::optional<TensorSlice>(part)});
    return absl::OkStatus();
  }

  int64_t total_floats() const { return total_floats_; }
  const std::vector<DequantizeJob>& jobs() const { return jobs_; }

  // After decoding: the file pages of matrices kept only as decoded copies leave this process.
  // The gathered copies move to weights->shard_storage.
  void Finish() {
    for (const GgufTensorInfo* info : to_drop_) file_.DropPages(info->data, info->num_bytes);
    if (!gathered_.empty()) {
      weights_->shard_storage =
          std::make_shared<std::vector<std::vector<uint8_t>>>(std::move(gathered_));
    }
  }

 private:
  const GgufFile& file_;
  ModelWeights* weights_;
  std::vector<DequantizeJob> jobs_;
  std::vector<std::vector<uint8_t>> gathered_;  // moving it keeps each copy's bytes in place
  std::vector<const GgufTensorInfo*> to_drop_;
  int64_t total_floats_ = 0;
};

}  // namespace

absl::StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& file) {
  ModelConfig config;
  KVSERVE_ASSIGN_OR_RETURN(std::string arch, file.GetString("general.architecture"));
  if (arch != "llama" && arch != "qwen2") {
    return absl::UnimplementedError(
        absl::StrCat("GGUF architecture '", arch, "' is not supported (llama, qwen2)"));
  }
  config.architecture = arch;
  config.rope_style = arch == "llama" ? RopeStyle::kInterleaved : RopeStyle::kHalf;
  if (file.Has("general.name")) {
    KVSERVE_ASSIGN_OR_RETURN(std::string name, file.GetString("general.name"));
    config.name = name;
  }
  const std::string p = arch + ".";
  for (auto [key, field] : {std::pair{"block_count", &config.num_layers},
                            std::pair{"embedding_length", &config.hidden_size},
                            std::pair{"attention.head_count", &config.num_heads},
                            std::pair{"feed_forward_length", &config.intermediate_size},
                            std::pair{"context_length", &config.max_context}}) {
    KVSERVE_RETURN_IF_ERROR(ReadInt32(file, p + key, /*required=*/true, field));
  }
  config.num_kv_heads = config.num_heads;
  KVSERVE_RETURN_IF_ERROR(
      ReadInt32(file, p + "attention.head_count_kv", false, &config.num_kv_heads));
  config.head_dim = config.num_heads > 0 ? config.hidden_size / config.num_heads : 0;
  KVSERVE_RETURN_IF_ERROR(ReadInt32(file, p + "attention.key_length", false, &config.head_dim));
  int32_t rotary_dims = config.head_dim;
  KVSERVE_RETURN_IF_ERROR(ReadInt32(file, p + "rope.dimension_count", false, &rotary_dims));
  if (rotary_dims != config.head_dim) {
    return absl::UnimplementedError(absl::StrCat(p, "rope.dimension_count = ", rotary_dims,
                                                 ": partial rotary embeddings (head_dim ",
                                                 config.head_dim, ") are not supported"));
  }
  for (auto [key, field] : {std::pair{"rope.freq_base", &config.rope_theta},
                            std::pair{"attention.layer_norm_rms_epsilon", &config.rms_norm_eps}}) {
    KVSERVE_RETURN_IF_ERROR(ReadFloat(file, p + key, field));
  }
  // RoPE scaling: linear is a metadata pair; llama3-style scaling is baked by llama.cpp into a
  // per-frequency tensor that ModelConfig cannot express.
  if (file.FindTensor("rope_freqs.weight") != nullptr) {
    return absl::UnimplementedError(
        "GGUF tensor 'rope_freqs.weight' (per-frequency RoPE factors, llama3 scaling) is not "
        "supported; load the Hugging Face checkpoint instead");
  }
  if (file.Has(p + "rope.scaling.type")) {
    KVSERVE_ASSIGN_OR_RETURN(std::string type, file.GetString(p + "rope.scaling.type"));
    if (type == "linear") {
      config.rope_scaling.type = RopeScaling::Type::kLinear;
      KVSERVE_RETURN_IF_ERROR(
          ReadFloat(file, p + "rope.scaling.factor", &config.rope_scaling.factor));
    } else if (type != "none") {
      return absl::UnimplementedError(
          absl::StrCat(p, "rope.scaling.type '", type, "' is not supported (none, linear)"));
    }
  }
  if (file.Has("tokenizer.ggml.tokens")) {
    KVSERVE_ASSIGN_OR_RETURN(int64_t n, file.GetArrayLength("tokenizer.ggml.tokens"));
    if (n > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError("tokenizer.ggml.tokens: too many tokens");
    }
    config.vocab_size = static_cast<int32_t>(n);
  } else
    KVSERVE_RETURN_IF_ERROR(ReadInt32(file, p + "vocab_size", true, &config.vocab_size));
  KVSERVE_RETURN_IF_ERROR(
      ReadInt32(file, "tokenizer.ggml.bos_token_id", false, &config.bos_token_id));
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"}) {
    int32_t id = -1;
    KVSERVE_RETURN_IF_ERROR(ReadInt32(file, key, false, &id));
    if (id >= 0 && (config.eos_token_ids.empty() || config.eos_token_ids[0] != id)) {
      config.eos_token_ids.push_back(id);
    }
  }
  config.tie_word_embeddings = file.FindTensor("output.weight") == nullptr;
  config.attention_bias = file.FindTensor("blk.0.attn_q.bias") != nullptr;
  KVSERVE_RETURN_IF_ERROR(config.Validate());
  return config;
}

absl::StatusOr<ModelWeights> WeightsFromGguf(const GgufFile& file, const GgufLoadOptions& options) {
  KVSERVE_ASSIGN_OR_RETURN(ModelConfig config, ConfigFromGguf(file));
  ModelWeights weights;
  weights.config = config;
  weights.tp_rank = options.tp_rank;
  weights.tp_size = options.tp_size;
  if (absl::StatusOr<TensorShard> shard = weights.shard(); !shard.ok()) return shard.status();
  absl::Status s = CheckTensorCount(weights.config, file.tensors().size());
  if (!s.ok()) return s;
  JobList jobs(file, &weights);
  for (const WeightSlot& slot : WeightSlots(&weights)) {
    const bool keep = options.keep_stored_types && slot.kind == WeightSlot::Kind::kMatrix;
    if (s = jobs.Add(slot, keep); !s.ok()) return s;
  }
  if (options.max_total_floats >= 0 && jobs.total_floats() > options.max_total_floats) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "model has ", jobs.total_floats(), " weights, over the cap of ", options.max_total_floats));
  }
  if (s = DequantizeAll(jobs.jobs(), options.num_threads); !s.ok()) return s;
  jobs.Finish();
  if (s = weights.Validate(); !s.ok()) return s;
  return weights;
}

}  // namespace kvserve
