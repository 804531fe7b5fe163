// Tokenizer::FromHfJson: a Hugging Face tokenizer.json (BPE model) and the tokenizer_config.json
// beside it as a TokenizerSpec. Only the shapes the supported model families use are accepted;
// anything else fails with a message naming the part of the file.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

namespace kvserve {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // "▁"

// Split patterns of tokenizer.json files (Split pre-tokenizer, "Regex") that we implement.
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

absl::StatusOr<Json> ReadJson(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  Json json = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), " is not valid JSON"));
  }
  return json;
}

// node[key], or null when node is not an object or lacks the key (const operator[] would be UB).
const Json& Field(const Json& node, std::string_view key) {
  static const Json* const kNull = new Json();
  if (!node.is_object()) return *kNull;
  auto it = node.find(key);
  return it == node.end() ? *kNull : *it;
}

// node[key] as a string, or "" when absent or not a string.
std::string Str(const Json& node, std::string_view key) {
  const Json& field = Field(node, key);
  return field.is_string() ? field.get<std::string>() : "";
}

std::string TypeOf(const Json& node) { return Str(node, "type"); }

// A token given as "text" or {"content": "text"} (tokenizer_config.json), or "" when absent.
std::string TokenText(const Json& node) {
  if (node.is_string()) return node.get<std::string>();
  return Str(node, "content");
}

// Byte-level split regime of a pre_tokenizer node; NOT_FOUND when it is not byte-level.
absl::StatusOr<PreTokenizerRegime> ByteLevelRegime(const Json& pre) {
  const std::string type = TypeOf(pre);
  if (type == "ByteLevel") {
    if (pre.value("add_prefix_space", false) || !pre.value("use_regex", true)) {
      return absl::InvalidArgumentError(
          "pre_tokenizer ByteLevel with add_prefix_space or without use_regex is not supported");
    }
    return PreTokenizerRegime::kGpt2;
  }
  if (type != "Sequence") return absl::NotFoundError("not byte-level");
  const Json& steps = Field(pre, "pretokenizers");
  if (!steps.is_array() || steps.size() != 2 || TypeOf(steps[1]) != "ByteLevel") {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported pre_tokenizer sequence: ", pre.dump().substr(0, 300)));
  }
  if (TypeOf(steps[0]) == "Digits" && steps[0].value("individual_digits", false) &&
      steps[1].value("use_regex", true)) {
    return PreTokenizerRegime::kSmolLm;
  }
  const std::string pattern = Str(Field(steps[0], "pattern"), "Regex");
  if (TypeOf(steps[0]) == "Split" && !pattern.empty() && !steps[1].value("use_regex", true)) {
    if (pattern == kLlama3Pattern) return PreTokenizerRegime::kLlama3;
    if (pattern == kQwen2Pattern) return PreTokenizerRegime::kQwen2;
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported pre_tokenizer split pattern: ", pattern));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported pre_tokenizer sequence: ", pre.dump().substr(0, 300)));
}

// SentencePiece-style normalizer / Metaspace settings; false when the file has neither.
absl::StatusOr<bool> ReadSentencePiece(const Json& root, TokenizerSpec* spec) {
  const Json& normalizer = Field(root, "normalizer");
  const Json& pre = Field(root, "pre_tokenizer");
  if (TypeOf(pre) == "Metaspace") {
    if (pre.value("replacement", std::string(kSpaceMark)) != kSpaceMark) {
      return absl::InvalidArgumentError("Metaspace replacement other than U+2581");
    }
    const std::string scheme = pre.contains("prepend_scheme")
                                   ? Str(pre, "prepend_scheme")
                                   : (pre.value("add_prefix_space", true) ? "always" : "never");
    spec->space_prefix = scheme == "never"   ? SpacePrefix::kNone
                         : scheme == "first" ? SpacePrefix::kFirst
                                             : SpacePrefix::kEverySegment;
    spec->split_on_space = pre.value("split", true);
    spec->no_prefix_before_space = true;
    return true;
  }
  if (!pre.is_null()) return false;
  std::vector<Json> steps;
  if (TypeOf(normalizer) == "Sequence") {
    const Json& list = Field(normalizer, "normalizers");
    steps.assign(list.begin(), list.end());
  } else if (!normalizer.is_null()) {
    steps.push_back(normalizer);
  }
  bool replaces_spaces = false;
  for (const Json& step : steps) {
    if (TypeOf(step) == "Prepend" && Str(step, "prepend") == kSpaceMark) {
      spec->space_prefix = SpacePrefix::kEverySegment;
    } else if (TypeOf(step) == "Replace" && Str(Field(step, "pattern"), "String") == " " &&
               Str(step, "content") == kSpaceMark) {
      replaces_spaces = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported normalizer step: ", step.dump().substr(0, 200)));
    }
  }
  return replaces_spaces;
}

bool DecoderStripsLeadingSpace(const Json& decoder) {
  if (TypeOf(decoder) == "Sequence") {
    for (const Json& step : Field(decoder, "decoders")) {
      if (DecoderStripsLeadingSpace(step)) return true;
    }
    return false;
  }
  if (TypeOf(decoder) == "Strip") return decoder.value("start", 0) >= 1;
  if (TypeOf(decoder) == "Metaspace") return decoder.value("prepend_scheme", "always") != "never";
  return false;
}

absl::Status ReadVocabulary(const Json& root, TokenizerSpec* spec) {
  const Json& model = Field(root, "model");
  if (TypeOf(model) != "BPE") {
    return absl::InvalidArgumentError(
        absl::StrCat("model.type '", TypeOf(model), "' is not supported (BPE only)"));
  }
  const auto place = [&](int64_t id, const std::string& piece, TokenKind kind) -> absl::Status {
    if (id < 0 || id > 10'000'000) {
      return absl::InvalidArgumentError(absl::StrCat("token '", piece, "' has id ", id));
    }
    if (static_cast<size_t>(id) >= spec->pieces.size()) {
      spec->pieces.resize(id + 1);
      spec->kinds.resize(id + 1, TokenKind::kUnused);
    }
    spec->pieces[id] = piece;
    spec->kinds[id] = kind;
    return absl::OkStatus();
  };
  for (const auto& [piece, id] : Field(model, "vocab").items()) {
    const bool is_byte = spec->byte_fallback && piece.size() == 6 && piece.starts_with("<0x");
    if (absl::Status s =
            place(id.get<int64_t>(), piece, is_byte ? TokenKind::kByte : TokenKind::kNormal);
        !s.ok()) {
      return s;
    }
  }
  for (const Json& added : Field(root, "added_tokens")) {
    const TokenKind kind =
        added.value("special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
    KVSERVE_RETURN_IF_ERROR(place(Field(added, "id").get<int64_t>(), Str(added, "content"), kind));
  }
  for (size_t id = 0; id < spec->pieces.size(); ++id) {
    if (spec->kinds[id] == TokenKind::kUnused && spec->pieces[id].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("no token has id ", id));
    }
  }
  for (const Json& merge : Field(model, "merges")) {
    if (merge.is_array() && merge.size() == 2) {
      spec->merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      continue;
    }
    const std::string text = merge.is_string() ? merge.get<std::string>() : merge.dump();
    const size_t space = text.find(' ');
    if (!merge.is_string() || space == std::string::npos || space == 0 ||
        text.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("malformed merge '", text, "'"));
    }
    spec->merges.emplace_back(text.substr(0, space), text.substr(space + 1));
  }
  return absl::OkStatus();
}

int32_t FindId(const TokenizerSpec& spec, const std::string& piece) {
  if (piece.empty()) return -1;
  for (size_t id = 0; id < spec.pieces.size(); ++id) {
    if (spec.pieces[id] == piece) return static_cast<int32_t>(id);
  }
  return -1;
}

absl::Status ReadConfig(const std::filesystem::path& dir, const Json& root, TokenizerSpec* spec) {
  // Default BOS from the post-processor: a template that starts with a special token.
  const Json& post = Field(root, "post_processor");
  const Json& single = Field(post, "single");
  if (TypeOf(post) == "TemplateProcessing" && single.is_array() && !single.empty()) {
    const std::string first = Str(Field(single[0], "SpecialToken"), "id");
    spec->bos_id = FindId(*spec, first);
    spec->add_bos = spec->bos_id >= 0;
  }
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    KVSERVE_ASSIGN_OR_RETURN(Json config, ReadJson(config_path));
    struct NamedId {
      const char* key;
      int32_t* id;
    };
    for (const NamedId& named :
         {NamedId{"bos_token", &spec->bos_id}, NamedId{"eos_token", &spec->eos_id},
          NamedId{"pad_token", &spec->pad_id}}) {
      const std::string text = TokenText(Field(config, named.key));
      if (!text.empty()) *named.id = FindId(*spec, text);
    }
    const Json& add_bos = Field(config, "add_bos_token");
    if (add_bos.is_boolean()) spec->add_bos = add_bos.get<bool>();
    const Json& chat = Field(config, "chat_template");
    if (chat.is_string()) spec->chat_template = chat.get<std::string>();
    for (const Json& named : chat.is_array() ? chat : Json::array()) {
      if (Str(named, "name") == "default") spec->chat_template = Str(named, "template");
    }
  }
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  if (spec->chat_template.empty() && std::filesystem::exists(jinja_path)) {
    std::ifstream in(jinja_path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    spec->chat_template = text.str();
  }
  return absl::OkStatus();
}

absl::StatusOr<TokenizerSpec> ReadSpec(const std::filesystem::path& path) {
  KVSERVE_ASSIGN_OR_RETURN(Json root, ReadJson(path));
  TokenizerSpec spec;
  const Json& model = Field(root, "model");
  spec.byte_fallback = model.value("byte_fallback", false);
  spec.ignore_merges = model.value("ignore_merges", false);
  absl::StatusOr<PreTokenizerRegime> regime = ByteLevelRegime(Field(root, "pre_tokenizer"));
  if (regime.ok()) {
    spec.type = TokenizerType::kByteLevelBpe;
    spec.regime = *regime;
  } else if (absl::IsNotFound(regime.status())) {
    KVSERVE_ASSIGN_OR_RETURN(bool sentencepiece, ReadSentencePiece(root, &spec));
    if (!sentencepiece) {
      return absl::InvalidArgumentError(
          "tokenizer is neither byte-level BPE nor SentencePiece-style (no ByteLevel or "
          "Metaspace pre-tokenizer, no '▁' normalizer)");
    }
    spec.type = TokenizerType::kSentencePieceBpe;
    spec.strip_leading_space = DecoderStripsLeadingSpace(Field(root, "decoder"));
  } else {
    return regime.status();
  }
  KVSERVE_RETURN_IF_ERROR(ReadVocabulary(root, &spec));
  if (const std::string unk = Str(model, "unk_token"); !unk.empty()) {
    spec.unk_id = FindId(spec, unk);
    if (spec.unk_id >= 0 && spec.kinds[spec.unk_id] == TokenKind::kNormal) {
      spec.kinds[spec.unk_id] = TokenKind::kUnknown;
    }
  }
  KVSERVE_RETURN_IF_ERROR(ReadConfig(path.parent_path(), root, &spec));
  return spec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfJson(
    const std::string& tokenizer_json_path) {
  KVSERVE_ASSIGN_OR_RETURN(TokenizerSpec spec, SpecFromHfJson(tokenizer_json_path));
  return FromSpec(std::move(spec));
}

absl::StatusOr<TokenizerSpec> Tokenizer::SpecFromHfJson(const std::string& tokenizer_json_path) {
  absl::StatusOr<TokenizerSpec> spec;
  try {
    spec = ReadSpec(tokenizer_json_path);
  } catch (const Json::exception& e) {  // a field of the wrong JSON type
    return absl::InvalidArgumentError(absl::StrCat(tokenizer_json_path, ": ", e.what()));
  }
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat(tokenizer_json_path, ": ", spec.status().message()));
  }
  return spec;
}

}  // namespace kvserve
