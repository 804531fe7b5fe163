#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space

// Debian's abseil has its own string_view type; lookups and StrCat need it spelled so.
absl::string_view Sv(std::string_view text) { return absl::string_view(text.data(), text.size()); }

std::string ReplaceSpaces(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0;;) {
    const size_t next = text.find(from, pos);
    out.append(text.substr(pos, next - pos));
    if (next == std::string_view::npos) return out;
    out.append(to);
    pos = next + from.size();
  }
}

bool IsMatchedInText(TokenKind kind) {
  return kind == TokenKind::kControl || kind == TokenKind::kUserDefined;
}

// Byte value of a SentencePiece "<0xXX>" piece, or -1.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

absl::Status CheckId(int32_t id, int32_t vocab_size, std::string_view name) {
  if (id < -1 || id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer ", Sv(name), " id ", id,
                                                   " is outside the vocabulary of ", vocab_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSpec(TokenizerSpec spec) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(std::move(spec)));
  KVSERVE_RETURN_IF_ERROR(tokenizer->Build());
  return tokenizer;
}

absl::Status Tokenizer::Build() {
  const int32_t vocab_size = static_cast<int32_t>(spec_.pieces.size());
  if (vocab_size == 0) return absl::InvalidArgumentError("tokenizer has an empty vocabulary");
  if (spec_.kinds.empty()) spec_.kinds.assign(vocab_size, TokenKind::kNormal);
  if (spec_.kinds.size() != spec_.pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", spec_.kinds.size(),
                                                   " token types for ", vocab_size, " tokens"));
  }
  for (auto [id, name] : {std::pair{spec_.bos_id, "bos"}, std::pair{spec_.eos_id, "eos"},
                          std::pair{spec_.unk_id, "unk"}, std::pair{spec_.pad_id, "pad"}}) {
    KVSERVE_RETURN_IF_ERROR(CheckId(id, vocab_size, name));
  }
  for (int32_t id = 0; id < vocab_size; ++id) {
    const std::string& piece = spec_.pieces[id];
    if (piece.empty() && IsMatchedInText(spec_.kinds[id])) {
      return absl::InvalidArgumentError(absl::StrCat("special token ", id, " has no text"));
    }
    if (!piece.empty()) piece_to_id_.try_emplace(piece, id);
  }
  BuildTokenBytes();
  KVSERVE_RETURN_IF_ERROR(BuildByteSymbols());
  KVSERVE_RETURN_IF_ERROR(BuildMerges());
  BuildSpecials();
  return absl::OkStatus();
}

void Tokenizer::BuildTokenBytes() {
  const bool byte_level = spec_.type == TokenizerType::kByteLevelBpe;
  token_bytes_.resize(spec_.pieces.size());
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const std::string& piece = spec_.pieces[id];
    std::string& bytes = token_bytes_[id];
    const TokenKind kind = spec_.kinds[id];
    if (IsMatchedInText(kind) || kind == TokenKind::kUnknown) {
      bytes = piece;
    } else if (kind == TokenKind::kByte && ParseBytePiece(piece) >= 0) {
      bytes.push_back(static_cast<char>(ParseBytePiece(piece)));
    } else if (byte_level) {
      for (size_t pos = 0; pos < piece.size();) {
        const size_t start = pos;
        const int byte = ByteLevelByte(DecodeUtf8(piece, &pos));
        if (byte >= 0) {
          bytes.push_back(static_cast<char>(byte));
        } else {
          bytes.append(piece, start, pos - start);  // not in the byte alphabet: keep as written
        }
      }
    } else {
      bytes = ReplaceSpaces(piece, kSpaceMark, " ");
    }
  }
}

absl::Status Tokenizer::BuildByteSymbols() {
  const bool byte_level = spec_.type == TokenizerType::kByteLevelBpe;
  byte_ids_.fill(-1);
  if (byte_level || spec_.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      const std::string piece =
          byte_level ? ByteLevelPiece(static_cast<uint8_t>(b)) : absl::StrFormat("<0x%02X>", b);
      byte_ids_[b] = PieceToId(piece);
      // Byte-level vocabularies may lack bytes (SmolLM2 has no 0x04, 0xC0, ...): such bytes are
      // dropped, as Hugging Face does. A byte-fallback vocabulary must be complete.
      if (byte_ids_[b] < 0 && !byte_level) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tokenizer has byte_fallback but no token '%s' for byte 0x%02X", piece, b));
      }
    }
  }
  return absl::OkStatus();
}

// Merges come from the merge list (rank = position), else from scores (SentencePiece).
absl::Status Tokenizer::BuildMerges() {
  const bool byte_level = spec_.type == TokenizerType::kByteLevelBpe;
  const int32_t vocab_size = this->vocab_size();
  if (!spec_.merges.empty()) {
    for (size_t rank = 0; rank < spec_.merges.size(); ++rank) {
      const auto& [left, right] = spec_.merges[rank];
      const int32_t left_id = PieceToId(left);
      const int32_t right_id = PieceToId(right);
      const int32_t merged_id = PieceToId(absl::StrCat(left, right));
      if (left_id < 0 || right_id < 0 || merged_id < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer merge #", rank, " '", left, " ", right, "': '",
                         left_id < 0 ? left : (right_id < 0 ? right : absl::StrCat(left, right)),
                         "' is not in the vocabulary"));
      }
      merges_.Add(left_id, right_id, merged_id, static_cast<int32_t>(rank));
    }
  } else if (!byte_level && !spec_.scores.empty()) {
    if (spec_.scores.size() != spec_.pieces.size()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer has ", spec_.scores.size(),
                                                     " scores for ", vocab_size, " tokens"));
    }
    std::map<float, int32_t, std::greater<float>> rank_of_score;  // higher score merges first
    for (float score : spec_.scores) {
      if (!std::isfinite(score)) return absl::InvalidArgumentError("tokenizer score is not finite");
      rank_of_score.emplace(score, 0);
    }
    int32_t rank = 0;
    for (auto& [score, r] : rank_of_score) r = rank++;
    for (int32_t id = 0; id < vocab_size; ++id) {
      const std::string& piece = spec_.pieces[id];
      if (spec_.kinds[id] != TokenKind::kNormal) continue;
      size_t split = 0;
      DecodeUtf8(piece, &split);  // every split point between two characters
      while (split < piece.size()) {
        const int32_t left_id = PieceToId(std::string_view(piece).substr(0, split));
        const int32_t right_id = PieceToId(std::string_view(piece).substr(split));
        if (left_id >= 0 && right_id >= 0) {
          merges_.Add(left_id, right_id, id, rank_of_score[spec_.scores[id]]);
        }
        DecodeUtf8(piece, &split);
      }
    }
  } else {
    return absl::InvalidArgumentError(
        byte_level ? "byte-level BPE tokenizer has no merges"
                   : "SentencePiece BPE tokenizer has neither merges nor token scores");
  }
  return absl::OkStatus();
}

void Tokenizer::BuildSpecials() {
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (!IsMatchedInText(spec_.kinds[id])) continue;
    specials_by_first_byte_[static_cast<uint8_t>(spec_.pieces[id][0])].push_back(id);
  }
  for (auto& ids : specials_by_first_byte_) {
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      return spec_.pieces[a].size() > spec_.pieces[b].size();
    });
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && spec_.bos_id >= 0) ids.push_back(spec_.bos_id);
  size_t segment_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t special = -1;
    for (int32_t id : specials_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if (text.substr(pos).starts_with(spec_.pieces[id])) {
        special = id;  // the longest one, as they are sorted longest first
        break;
      }
    }
    if (special < 0) {
      ++pos;
      continue;
    }
    EncodeSegment(text.substr(segment_start, pos - segment_start), segment_start == 0, &ids);
    ids.push_back(special);
    pos += spec_.pieces[special].size();
    segment_start = pos;
  }
  EncodeSegment(text.substr(segment_start), segment_start == 0, &ids);
  return ids;
}

void Tokenizer::EncodeSegment(std::string_view text, bool first_segment,
                              std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  if (spec_.type == TokenizerType::kByteLevelBpe) {
    std::vector<std::string_view> words;
    SplitWords(spec_.regime, text, &words);
    std::vector<int32_t> symbols;
    for (std::string_view word : words) {
      if (spec_.ignore_merges) {
        std::string spelled;
        for (char c : word) spelled += ByteLevelPiece(static_cast<uint8_t>(c));
        if (int32_t id = PieceToId(spelled); id >= 0) {
          ids->push_back(id);
          continue;
        }
      }
      symbols.clear();
      for (char c : word) {
        if (int32_t id = byte_ids_[static_cast<uint8_t>(c)]; id >= 0) symbols.push_back(id);
      }
      merges_.Apply(&symbols);
      ids->insert(ids->end(), symbols.begin(), symbols.end());
    }
    return;
  }
  std::string normalized;
  const bool prefix = spec_.space_prefix == SpacePrefix::kEverySegment ||
                      (spec_.space_prefix == SpacePrefix::kFirst && first_segment);
  if (prefix && !(spec_.no_prefix_before_space && text.front() == ' ')) normalized = kSpaceMark;
  normalized += ReplaceSpaces(text, " ", kSpaceMark);
  if (!spec_.split_on_space) {
    EncodeSentencePieceWord(normalized, ids);
    return;
  }
  std::string_view rest = normalized;
  while (!rest.empty()) {
    const size_t next = rest.find(kSpaceMark, rest.starts_with(kSpaceMark) ? kSpaceMark.size() : 0);
    EncodeSentencePieceWord(rest.substr(0, next), ids);
    rest.remove_prefix(next == std::string_view::npos ? rest.size() : next);
  }
}

void Tokenizer::EncodeSentencePieceWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (spec_.ignore_merges) {
    if (int32_t id = PieceToId(word); id >= 0 && spec_.kinds[id] == TokenKind::kNormal) {
      ids->push_back(id);
      return;
    }
  }
  std::vector<int32_t> symbols;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    DecodeUtf8(word, &pos);
    const std::string_view character = word.substr(start, pos - start);
    if (int32_t id = PieceToId(character); id >= 0) {
      symbols.push_back(id);
    } else if (spec_.byte_fallback) {
      for (char c : character) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    } else if (symbols.empty() || symbols.back() != spec_.unk_id) {
      symbols.push_back(spec_.unk_id);  // consecutive unknown characters fuse into one unk
    }
  }
  symbols.erase(std::remove(symbols.begin(), symbols.end(), -1), symbols.end());  // no unk token
  merges_.Apply(&symbols);
  ids->insert(ids->end(), symbols.begin(), symbols.end());
}

void Tokenizer::AppendTokenBytes(int32_t id, bool skip_special, std::string* out) const {
  if (id < 0 || id >= vocab_size()) return;
  const TokenKind kind = spec_.kinds[id];
  if (skip_special && (kind == TokenKind::kControl || kind == TokenKind::kUnknown)) return;
  out->append(token_bytes_[id]);
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) AppendTokenBytes(id, skip_special, &bytes);
  std::string_view view = bytes;
  if (spec_.strip_leading_space && view.starts_with(' ')) view.remove_prefix(1);
  std::string text;
  AppendValidUtf8(view, /*final=*/true, &text);
  return text;
}

const std::string& Tokenizer::IdToPiece(int32_t id) const {
  static const std::string* const kEmpty = new std::string;
  return id >= 0 && id < vocab_size() ? spec_.pieces[id] : *kEmpty;
}

int32_t Tokenizer::PieceToId(std::string_view piece) const {
  auto it = piece_to_id_.find(Sv(piece));
  return it == piece_to_id_.end() ? -1 : it->second;
}

}  // namespace kvserve
