// Tokenizer::FromGguf: the tokenizer.ggml.* metadata of a GGUF file as a TokenizerSpec; and
// Tokenizer::FromModelPath, which picks the reader from the model path.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

// GGUF token_type values.
absl::StatusOr<TokenKind> KindFromGguf(int64_t type, size_t id) {
  switch (type) {
    case 0:  // undefined: treated as normal, as llama.cpp does
    case 1:
      return TokenKind::kNormal;
    case 2:
      return TokenKind::kUnknown;
    case 3:
      return TokenKind::kControl;
    case 4:
      return TokenKind::kUserDefined;
    case 5:
      return TokenKind::kUnused;
    case 6:
      return TokenKind::kByte;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.ggml.token_type[", id, "] = ", type, " is not a token type"));
  }
}

// The value of an optional key: `fallback` when absent, the error when present but unreadable.
template <typename T, typename Getter>
absl::StatusOr<T> Optional(const GgufFile& gguf, std::string_view key, T fallback, Getter getter) {
  if (!gguf.Has(key)) return fallback;
  KVSERVE_ASSIGN_OR_RETURN(auto value, (gguf.*getter)(key));
  return static_cast<T>(value);
}

absl::Status WithKey(const absl::Status& status, std::string_view key) {
  return absl::Status(status.code(), absl::StrCat(std::string(key), ": ", status.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  KVSERVE_ASSIGN_OR_RETURN(TokenizerSpec spec, SpecFromGguf(gguf));
  return FromSpec(std::move(spec));
}

absl::StatusOr<TokenizerSpec> Tokenizer::SpecFromGguf(const GgufFile& gguf) {
  TokenizerSpec spec;
  absl::StatusOr<std::string> model = gguf.GetString("tokenizer.ggml.model");
  if (!model.ok()) return WithKey(model.status(), "tokenizer.ggml.model");
  if (*model == "gpt2") {
    spec.type = TokenizerType::kByteLevelBpe;
  } else if (*model == "llama") {
    spec.type = TokenizerType::kSentencePieceBpe;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.ggml.model '", *model, "' is not supported (gpt2 or llama)"));
  }
  const bool byte_level = spec.type == TokenizerType::kByteLevelBpe;

  absl::StatusOr<std::vector<std::string>> tokens = gguf.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return WithKey(tokens.status(), "tokenizer.ggml.tokens");
  spec.pieces = std::move(*tokens);

  if (gguf.Has("tokenizer.ggml.token_type")) {
    absl::StatusOr<std::vector<int64_t>> types = gguf.GetIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return WithKey(types.status(), "tokenizer.ggml.token_type");
    for (size_t id = 0; id < types->size(); ++id) {
      KVSERVE_ASSIGN_OR_RETURN(TokenKind kind, KindFromGguf((*types)[id], id));
      spec.kinds.push_back(kind);
    }
  }
  if (gguf.Has("tokenizer.ggml.merges")) {
    absl::StatusOr<std::vector<std::string>> merges = gguf.GetStringArray("tokenizer.ggml.merges");
    if (!merges.ok()) return WithKey(merges.status(), "tokenizer.ggml.merges");
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string& merge = (*merges)[i];
      const size_t space = merge.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == merge.size() ||
          merge.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.merges[", i, "] = '", merge,
                                                       "' is not two pieces split by a space"));
      }
      spec.merges.emplace_back(merge.substr(0, space), merge.substr(space + 1));
    }
  }
  if (gguf.Has("tokenizer.ggml.scores")) {
    absl::StatusOr<std::vector<double>> scores = gguf.GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return WithKey(scores.status(), "tokenizer.ggml.scores");
    spec.scores.assign(scores->begin(), scores->end());
  }

  if (byte_level) {
    absl::StatusOr<std::string> pre =
        Optional<std::string>(gguf, "tokenizer.ggml.pre", "gpt2", &GgufFile::GetString);
    if (!pre.ok()) return WithKey(pre.status(), "tokenizer.ggml.pre");
    KVSERVE_ASSIGN_OR_RETURN(PreTokenizerRegime regime, RegimeFromGgufName(*pre));
    spec.regime = regime;
    spec.ignore_merges = spec.regime == PreTokenizerRegime::kLlama3;  // as Llama 3 itself does
  } else {
    absl::StatusOr<bool> prefix =
        Optional<bool>(gguf, "tokenizer.ggml.add_space_prefix", true, &GgufFile::GetBool);
    if (!prefix.ok()) return WithKey(prefix.status(), "tokenizer.ggml.add_space_prefix");
    spec.space_prefix = *prefix ? SpacePrefix::kFirst : SpacePrefix::kNone;
    spec.strip_leading_space = *prefix;
    spec.byte_fallback = true;  // llama vocabularies carry <0x00>..<0xFF>
  }

  struct IdKey {
    const char* key;
    int32_t* id;
  };
  for (const IdKey& k : {IdKey{"tokenizer.ggml.bos_token_id", &spec.bos_id},
                         IdKey{"tokenizer.ggml.eos_token_id", &spec.eos_id},
                         IdKey{"tokenizer.ggml.unknown_token_id", &spec.unk_id},
                         IdKey{"tokenizer.ggml.padding_token_id", &spec.pad_id}}) {
    absl::StatusOr<int64_t> id = Optional<int64_t>(gguf, k.key, -1, &GgufFile::GetInt);
    if (!id.ok()) return WithKey(id.status(), k.key);
    *k.id = static_cast<int32_t>(*id);
  }
  absl::StatusOr<bool> add_bos =
      Optional<bool>(gguf, "tokenizer.ggml.add_bos_token", !byte_level, &GgufFile::GetBool);
  if (!add_bos.ok()) return WithKey(add_bos.status(), "tokenizer.ggml.add_bos_token");
  spec.add_bos = *add_bos;
  absl::StatusOr<std::string> chat_template =
      Optional<std::string>(gguf, "tokenizer.chat_template", "", &GgufFile::GetString);
  if (!chat_template.ok()) return WithKey(chat_template.status(), "tokenizer.chat_template");
  spec.chat_template = std::move(*chat_template);
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelPath(const std::string& model_path) {
  if (absl::StartsWith(model_path, "synthetic:")) return std::unique_ptr<Tokenizer>();
  if (std::filesystem::is_directory(model_path)) return FromHfJson(model_path + "/tokenizer.json");
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(model_path));
  return FromGguf(*gguf);
}

}  // namespace kvserve
