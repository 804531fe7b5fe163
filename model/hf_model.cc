#include "model/hf_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "model/dequantize.h"
#include "model/safetensors_file.h"
#include "model/weight_slots.h"
#include "nlohmann/json.hpp"

namespace kvserve {
namespace {

using nlohmann::json;

absl::Status FieldError(std::string_view field, std::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: field '", absl::string_view(field.data(), field.size()), "' ",
                   absl::string_view(want.data(), want.size())));
}

// Reads an integer field into an int32; `required` makes absence an error.
absl::Status ReadInt(const json& config, const char* field, bool required, int32_t* out) {
  if (!config.contains(field) || config[field].is_null()) {
    return required ? FieldError(field, "is missing") : absl::OkStatus();
  }
  const json& value = config[field];
  if (!value.is_number_integer() || value.get<int64_t>() < std::numeric_limits<int32_t>::min() ||
      value.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
    return FieldError(field, "is not a 32-bit integer");
  }
  *out = value.get<int32_t>();
  return absl::OkStatus();
}

absl::Status ReadFloat(const json& config, const char* field, float* out) {
  if (!config.contains(field) || config[field].is_null()) return absl::OkStatus();
  if (!config[field].is_number()) return FieldError(field, "is not a number");
  *out = config[field].get<float>();
  return absl::OkStatus();
}

absl::Status ReadRopeScaling(const json& config, RopeScaling* scaling) {
  if (!config.contains("rope_scaling") || config["rope_scaling"].is_null()) {
    return absl::OkStatus();
  }
  const json& rope = config["rope_scaling"];
  if (!rope.is_object()) return FieldError("rope_scaling", "is not an object");
  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (rope.contains(key) && rope[key].is_string()) type = rope[key].get<std::string>();
  }
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    scaling->type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    scaling->type = RopeScaling::Type::kLlama3;
    KVSERVE_RETURN_IF_ERROR(ReadFloat(rope, "low_freq_factor", &scaling->low_freq_factor));
    KVSERVE_RETURN_IF_ERROR(ReadFloat(rope, "high_freq_factor", &scaling->high_freq_factor));
    KVSERVE_RETURN_IF_ERROR(
        ReadInt(rope, "original_max_position_embeddings", true, &scaling->original_max_position));
  } else {
    return absl::UnimplementedError(absl::StrCat("config.json: rope_scaling type '", type,
                                                 "' is not supported (linear, llama3)"));
  }
  if (!rope.contains("factor")) return FieldError("rope_scaling.factor", "is missing");
  return ReadFloat(rope, "factor", &scaling->factor);
}

// bos/eos ids may be an integer, a list of integers, or null.
absl::Status ReadIds(const json& config, const char* field, std::vector<int32_t>* ids) {
  if (!config.contains(field) || config[field].is_null()) return absl::OkStatus();
  const json& value = config[field];
  std::vector<json> items = value.is_array() ? value.get<std::vector<json>>() : std::vector{value};
  for (const json& item : items) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 ||
        item.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return FieldError(field, "is not a token id or a list of token ids");
    }
    ids->push_back(item.get<int32_t>());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The safetensors files of `dir`, in a stable order.
absl::StatusOr<std::vector<std::filesystem::path>> WeightFiles(const std::filesystem::path& dir) {
  const std::filesystem::path index = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index)) {
    KVSERVE_ASSIGN_OR_RETURN(std::string text, ReadText(index));
    const json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("weight_map") ||
        !parsed["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), ": want a JSON object with a \"weight_map\" object"));
    }
    std::vector<std::string> names;
    for (const auto& [tensor, file] : parsed["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index.string(), ": weight_map['", tensor, "'] is not a file name"));
      }
      names.push_back(file.get<std::string>());
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::vector<std::filesystem::path> files;
    for (const std::string& name : names) files.push_back(dir / name);
    return files;
  }
  if (std::filesystem::exists(dir / "model.safetensors")) {
    return std::vector<std::filesystem::path>{dir / "model.safetensors"};
  }
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  }
  if (files.size() != 1) {
    return absl::NotFoundError(
        absl::StrCat(dir.string(),
                     ": want model.safetensors, model.safetensors.index.json or one "
                     "*.safetensors file; found ",
                     files.size(), " *.safetensors files"));
  }
  return files;
}

}  // namespace

absl::StatusOr<ModelConfig> ConfigFromHfJson(std::string_view json_text) {
  const json config = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  ModelConfig c;
  std::string arch;
  if (config.contains("architectures") && config["architectures"].is_array() &&
      !config["architectures"].empty() && config["architectures"][0].is_string()) {
    arch = config["architectures"][0].get<std::string>();
  } else if (config.contains("model_type") && config["model_type"].is_string()) {
    arch = config["model_type"].get<std::string>();
  }
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || arch == "llama" ||
      arch == "mistral") {
    c.architecture = "llama";
  } else if (arch == "Qwen2ForCausalLM" || arch == "qwen2") {
    c.architecture = "qwen2";
    c.attention_bias = true;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "config.json: architecture '", arch,
        "' is not supported (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)"));
  }
  c.rope_style = RopeStyle::kHalf;
  if (config.contains("_name_or_path") && config["_name_or_path"].is_string()) {
    c.name = config["_name_or_path"].get<std::string>();
  }
  for (auto [field, out] :
       {std::pair{"num_hidden_layers", &c.num_layers}, std::pair{"hidden_size", &c.hidden_size},
        std::pair{"num_attention_heads", &c.num_heads},
        std::pair{"intermediate_size", &c.intermediate_size},
        std::pair{"vocab_size", &c.vocab_size},
        std::pair{"max_position_embeddings", &c.max_context}}) {
    KVSERVE_RETURN_IF_ERROR(ReadInt(config, field, true, out));
  }
  c.num_kv_heads = c.num_heads;
  KVSERVE_RETURN_IF_ERROR(ReadInt(config, "num_key_value_heads", false, &c.num_kv_heads));
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  KVSERVE_RETURN_IF_ERROR(ReadInt(config, "head_dim", false, &c.head_dim));
  KVSERVE_RETURN_IF_ERROR(ReadFloat(config, "rope_theta", &c.rope_theta));
  KVSERVE_RETURN_IF_ERROR(ReadFloat(config, "rms_norm_eps", &c.rms_norm_eps));
  KVSERVE_RETURN_IF_ERROR(ReadRopeScaling(config, &c.rope_scaling));
  for (auto [field, out] : {std::pair{"tie_word_embeddings", &c.tie_word_embeddings},
                            std::pair{"attention_bias", &c.attention_bias}}) {
    if (!config.contains(field) || config[field].is_null()) continue;
    if (!config[field].is_boolean()) return FieldError(field, "is not a boolean");
    *out = config[field].get<bool>();
  }
  std::vector<int32_t> bos;
  KVSERVE_RETURN_IF_ERROR(ReadIds(config, "bos_token_id", &bos));
  if (!bos.empty()) c.bos_token_id = bos[0];
  KVSERVE_RETURN_IF_ERROR(ReadIds(config, "eos_token_id", &c.eos_token_ids));
  KVSERVE_RETURN_IF_ERROR(c.Validate());
  return c;
}

absl::StatusOr<ModelWeights> LoadHfModel(const std::string& dir, const HfLoadOptions& options) {
  const std::filesystem::path root(dir);
  KVSERVE_ASSIGN_OR_RETURN(std::string config_text, ReadText(root / "config.json"));
  absl::StatusOr<ModelConfig> config = ConfigFromHfJson(config_text);
  if (!config.ok()) {
    return absl::Status(config.status().code(), absl::StrCat(dir, "/", config.status().message()));
  }
  KVSERVE_ASSIGN_OR_RETURN(std::vector<std::filesystem::path> paths, WeightFiles(root));
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  absl::flat_hash_map<std::string, const SafetensorsTensor*> tensors;
  for (const std::filesystem::path& path : paths) {
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                             SafetensorsFile::Open(path.string()));
    for (const SafetensorsTensor& tensor : file->tensors()) {
      if (!tensors.emplace(tensor.name, &tensor).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", tensor.name, "' appears in two shards (", path.string(), ")"));
      }
    }
    files.push_back(std::move(file));
  }
  ModelWeights weights;
  weights.config = *config;
  weights.tp_rank = options.tp_rank;
  weights.tp_size = options.tp_size;
  if (absl::StatusOr<TensorShard> shard = weights.shard(); !shard.ok()) return shard.status();
  if (absl::Status s = CheckTensorCount(weights.config, tensors.size()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(dir, ": ", s.message()));
  }
  std::vector<DequantizeJob> jobs;
  for (const WeightSlot& slot : WeightSlots(&weights)) {
    auto it = tensors.find(slot.hf_name);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": tensor '", slot.hf_name, "' is missing"));
    }
    const SafetensorsTensor& tensor = *it->second;
    if (tensor.shape != slot.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": tensor '", slot.hf_name, "' has shape [", absl::StrJoin(tensor.shape, ", "),
          "], want [", absl::StrJoin(slot.shape, ", "), "]"));
    }
    jobs.push_back({slot.hf_name, tensor.type, tensor.data, tensor.num_bytes, tensor.num_elements,
                    slot.out,
                    slot.slice.whole() ? std::nullopt : std::optional<TensorSlice>(slot.slice)});
  }
  KVSERVE_RETURN_IF_ERROR(DequantizeAll(jobs, options.num_threads));
  KVSERVE_RETURN_IF_ERROR(weights.Validate());
  return weights;
}

}  // namespace kvserve
