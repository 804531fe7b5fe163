// Tokenizer: text <-> token ids for the Llama-family models kvserve serves. Two algorithms:
//   kByteLevelBpe      GPT-2 style (SmolLM2, Llama 3, Qwen2): the text is split into words by the
//                      model's pre-tokenizer regime (tokenizer/bpe_pretokenizer.h), each word's
//                      UTF-8 bytes become byte-alphabet symbols, merges apply by rank. A byte the
//                      vocabulary has no symbol for (SmolLM2 lacks 0x04, 0xC0, ...) is
//                      dropped, as Hugging Face drops it.
//   kSentencePieceBpe  Llama 2 style: spaces are spelled "▁", optionally one "▁" is prepended,
//                      characters merge by merge rank (tokenizer.json) or by token score (GGUF),
//                      characters missing from the vocabulary become <0xXX> byte tokens.
// Special tokens (control and user-defined, e.g. "<|im_start|>") are matched in the text first
// and always become their single id; Encode never adds anything but an optional BOS.
// Decode returns valid UTF-8: ill-formed byte sequences become U+FFFD.
//
// A Tokenizer comes from a GGUF file's metadata (FromGguf), a Hugging Face tokenizer.json with
// its tokenizer_config.json (FromHfJson), or a TokenizerSpec (FromSpec), the plain description
// both readers produce; all three validate and fail with INVALID_ARGUMENT naming the problem
// (NOT_FOUND for a missing file or GGUF key, UNIMPLEMENTED for an unsupported tokenizer model).
//
// Thread-safety: immutable after construction; Encode/Decode may run concurrently.
#ifndef KVSERVE_TOKENIZER_TOKENIZER_H_
#define KVSERVE_TOKENIZER_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tokenizer/bpe_merges.h"
#include "tokenizer/bpe_pretokenizer.h"

namespace kvserve {

class GgufFile;

enum class TokenizerType { kByteLevelBpe, kSentencePieceBpe };

// What a vocabulary entry is (GGUF token_type values 1-6 map onto these).
enum class TokenKind : uint8_t {
  kNormal,       // reached by merges
  kControl,      // special: matched whole in text, skipped by Decode(skip_special = true)
  kUserDefined,  // added text: matched whole in text, always decoded
  kByte,         // SentencePiece <0xXX> byte fallback
  kUnknown,      // the unk token
  kUnused,
};

// Where SentencePiece puts its "▁" prefix: nowhere, only before the first text segment when it
// starts the input (llama.cpp, Metaspace prepend_scheme "first"), or before every text segment
// between special tokens (tokenizer.json Prepend normalizer).
enum class SpacePrefix { kNone, kFirst, kEverySegment };

// A tokenizer as plain data. `pieces` spell tokens as the vocabulary does (byte-level: in the
// byte alphabet; SentencePiece: with "▁"), except control and user-defined tokens, which hold
// their literal text.
struct TokenizerSpec {
  TokenizerType type = TokenizerType::kByteLevelBpe;
  PreTokenizerRegime regime = PreTokenizerRegime::kGpt2;    // byte-level only
  std::vector<std::string> pieces;                          // [vocab_size]
  std::vector<TokenKind> kinds;                             // [vocab_size] or empty (all normal)
  std::vector<std::pair<std::string, std::string>> merges;  // (left, right), best first
  std::vector<float> scores;                                // [vocab_size]; used when no merges
  bool ignore_merges = false;   // a word that is itself a token skips merging (Llama 3)
  bool byte_fallback = false;   // SentencePiece: unknown characters become <0xXX> tokens
  bool split_on_space = false;  // SentencePiece: words split before each "▁" (Metaspace split)
  SpacePrefix space_prefix = SpacePrefix::kNone;
  // Metaspace: a segment that already starts with a space gets no "▁" prefix.
  bool no_prefix_before_space = false;
  bool strip_leading_space = false;  // Decode drops one leading space (SentencePiece)
  int32_t bos_id = -1;               // -1 = none
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;       // the file's default for Encode's add_bos
  std::string chat_template;  // jinja source, may be empty
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* and tokenizer.chat_template.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  // Reads tokenizer.json and, when present beside it, tokenizer_config.json (chat_template,
  // bos_token, eos_token, add_bos_token) and chat_template.jinja.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromHfJson(
      const std::string& tokenizer_json_path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSpec(TokenizerSpec spec);
  // The tokenizer of a model as the weights loader names it: a Hugging Face directory
  // (<dir>/tokenizer.json) or a .gguf file. Synthetic models ("synthetic:...") have none: null.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromModelPath(const std::string& model_path);

  // The specs the two readers above build (checked only when a Tokenizer is made of them).
  static absl::StatusOr<TokenizerSpec> SpecFromGguf(const GgufFile& gguf);
  static absl::StatusOr<TokenizerSpec> SpecFromHfJson(const std::string& tokenizer_json_path);

  // Token ids of `text`, preceded by BOS when add_bos and the vocabulary has one.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const;

  // Text of `ids`; control tokens are left out when skip_special. Ids outside
  // [0, vocab_size) are left out.
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes one token contributes to Decode (not yet UTF-8 repaired, before the leading
  // space rule); nothing for an id out of range or a skipped control token.
  void AppendTokenBytes(int32_t id, bool skip_special, std::string* out) const;

  // The vocabulary's spelling of `id` ("Ġhello", "▁hello", "<0x0A>", "<|im_end|>"); empty when
  // out of range.
  const std::string& IdToPiece(int32_t id) const;
  // The id spelled `piece`, or -1.
  int32_t PieceToId(std::string_view piece) const;
  TokenKind Kind(int32_t id) const { return spec_.kinds[id]; }  // REQUIRES: id in range

  TokenizerType type() const { return spec_.type; }
  int32_t vocab_size() const { return static_cast<int32_t>(spec_.pieces.size()); }
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int32_t unk_id() const { return spec_.unk_id; }
  int32_t pad_id() const { return spec_.pad_id; }
  bool add_bos_by_default() const { return spec_.add_bos; }
  bool strips_leading_space() const { return spec_.strip_leading_space; }
  const std::string& chat_template() const { return spec_.chat_template; }
  // Replaces the model's chat template (--chat_template). REQUIRES: the tokenizer is not shared
  // yet (it is immutable once in use).
  void SetChatTemplate(std::string jinja_source) { spec_.chat_template = std::move(jinja_source); }

 private:
  explicit Tokenizer(TokenizerSpec spec) : spec_(std::move(spec)) {}
  absl::Status Build();  // validates spec_ and fills the tables below
  void BuildTokenBytes();
  absl::Status BuildByteSymbols();
  absl::Status BuildMerges();
  void BuildSpecials();

  // Appends the ids of a text segment that holds no special token.
  void EncodeSegment(std::string_view text, bool first_segment, std::vector<int32_t>* ids) const;
  void EncodeSentencePieceWord(std::string_view word, std::vector<int32_t>* ids) const;

  TokenizerSpec spec_;
  std::vector<std::string> token_bytes_;  // [vocab_size], what each token decodes to
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;  // first id of each spelling
  BpeMerges merges_;
  std::array<int32_t, 256> byte_ids_;  // [byte] -> byte-level symbol or <0xXX> token, -1 if none
  // Special and user-defined tokens by first byte of their text, longest first.
  std::array<std::vector<int32_t>, 256> specials_by_first_byte_;
};

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_TOKENIZER_H_
