#include "model/weights_loader.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "model/gguf_file.h"
#include "model/gguf_model.h"
#include "model/hf_model.h"
#include "model/synthetic_weights.h"

namespace kvserve {
namespace {

constexpr char kSyntheticPrefix[] = "synthetic:";

absl::Status BadSpec(const std::string& spec, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("model spec '", spec, "': ", absl::string_view(why.data(), why.size()),
                   " (want a .gguf file, a Hugging Face directory with config.json, or "
                   "synthetic:<preset>[:layers=N][:seed=S])"));
}

}  // namespace

absl::StatusOr<SyntheticSpec> ParseSyntheticSpec(const std::string& spec) {
  if (!absl::StartsWith(spec, kSyntheticPrefix)) return BadSpec(spec, "not synthetic:");
  const std::vector<std::string> parts =
      absl::StrSplit(absl::string_view(spec).substr(sizeof(kSyntheticPrefix) - 1), ':');
  SyntheticSpec out;
  out.preset = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view part = parts[i];
    if (absl::StartsWith(part, "layers=")) {
      if (!absl::SimpleAtoi(part.substr(7), &out.num_layers) || out.num_layers <= 0) {
        return BadSpec(spec, "layers= wants a positive integer");
      }
    } else if (absl::StartsWith(part, "seed=")) {
      if (!absl::SimpleAtoi(part.substr(5), &out.seed)) {
        return BadSpec(spec, "seed= wants an unsigned integer");
      }
    } else {
      return BadSpec(spec, absl::StrCat("unknown option '", part, "' (layers=, seed=)"));
    }
  }
  return out;
}

absl::StatusOr<ModelWeights> LoadWeights(const std::string& spec, const LoadOptions& options) {
  const int32_t tp_rank = options.tensor_parallel.rank;
  const int32_t tp_size = options.tensor_parallel.size;
  if (absl::StartsWith(spec, kSyntheticPrefix)) {
    KVSERVE_ASSIGN_OR_RETURN(SyntheticSpec parsed, ParseSyntheticSpec(spec));
    KVSERVE_ASSIGN_OR_RETURN(ModelConfig config, SyntheticConfig(parsed.preset));
    if (parsed.num_layers > 0) config.num_layers = parsed.num_layers;
    if (absl::StatusOr<TensorShard> shard = MakeTensorShard(config, tp_rank, tp_size);
        !shard.ok()) {
      return shard.status();
    }
    return MakeSyntheticWeights(config, parsed.seed, tp_rank, tp_size);
  }
  std::error_code error;
  const std::filesystem::path path(spec);
  if (std::filesystem::is_directory(path, error)) {
    if (!std::filesystem::exists(path / "config.json", error)) {
      return BadSpec(spec, "directory has no config.json");
    }
    return LoadHfModel(spec, {.tp_rank = tp_rank, .tp_size = tp_size});
  }
  if (path.extension() == ".gguf") {
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(spec));
    absl::StatusOr<ModelWeights> weights = WeightsFromGguf(
        *file,
        {.keep_stored_types = options.keep_stored_types, .tp_rank = tp_rank, .tp_size = tp_size});
    if (!weights.ok()) {
      return absl::Status(weights.status().code(),
                          absl::StrCat(spec, ": ", weights.status().message()));
    }
    if (!weights->stored.empty()) {
      auto gguf = std::shared_ptr<GgufFile>(std::move(file));
      weights->drop_stored_pages = [mapped = gguf.get()](const uint8_t* data, int64_t bytes) {
        mapped->DropPages(data, static_cast<uint64_t>(bytes));  // weights->storage keeps it alive
      };
      weights->storage = std::move(gguf);
    }
    return weights;
  }
  if (!std::filesystem::exists(path, error)) return BadSpec(spec, "no such file or directory");
  return BadSpec(spec, "not a .gguf file or a directory");
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& spec) {
  if (absl::StartsWith(spec, kSyntheticPrefix)) {
    KVSERVE_ASSIGN_OR_RETURN(SyntheticSpec parsed, ParseSyntheticSpec(spec));
    KVSERVE_ASSIGN_OR_RETURN(ModelConfig config, SyntheticConfig(parsed.preset));
    if (parsed.num_layers > 0) config.num_layers = parsed.num_layers;
    return config;
  }
  std::error_code error;
  const std::filesystem::path path(spec);
  if (std::filesystem::is_directory(path, error)) {
    std::ifstream file(path / "config.json", std::ios::binary);
    if (!file) return BadSpec(spec, "directory has no config.json");
    std::ostringstream text;
    text << file.rdbuf();
    absl::StatusOr<ModelConfig> config = ConfigFromHfJson(text.str());
    if (!config.ok()) {
      return absl::Status(config.status().code(),
                          absl::StrCat(spec, "/config.json: ", config.status().message()));
    }
    return config;
  }
  if (path.extension() == ".gguf") {
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(spec));
    absl::StatusOr<ModelConfig> config = ConfigFromGguf(*file);
    if (!config.ok()) {
      return absl::Status(config.status().code(),
                          absl::StrCat(spec, ": ", config.status().message()));
    }
    return config;
  }
  if (!std::filesystem::exists(path, error)) return BadSpec(spec, "no such file or directory");
  return BadSpec(spec, "not a .gguf file or a directory");
}

}  // namespace kvserve
