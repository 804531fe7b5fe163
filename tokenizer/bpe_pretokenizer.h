// Pre-tokenizer of byte-level BPE: splits text into the words that BPE merges never cross, the
// way each supported model family's split regex does, written by hand over Unicode categories
// (no regex engine). Regimes (named as GGUF tokenizer.ggml.pre spells them):
//   kGpt2   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   kSmolLm every \p{N} alone, then kGpt2 on the text between (SmolLM2, StarCoder)
//   kLlama3 (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kQwen2  kLlama3 with single \p{N}
// Bytes that are not valid UTF-8 count as "other" (neither letter, number nor space).
//
// Thread-safety: pure functions.
#ifndef KVSERVE_TOKENIZER_BPE_PRETOKENIZER_H_
#define KVSERVE_TOKENIZER_BPE_PRETOKENIZER_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve {

enum class PreTokenizerRegime { kGpt2, kSmolLm, kLlama3, kQwen2 };

// The regime for a GGUF tokenizer.ggml.pre value ("smollm", "llama-bpe", "qwen2", "gpt2", ...);
// INVALID_ARGUMENT naming the value when it is not supported.
absl::StatusOr<PreTokenizerRegime> RegimeFromGgufName(std::string_view name);

// Appends to *words the pieces of `text`, in order; they concatenate to `text`. The views point
// into `text`.
void SplitWords(PreTokenizerRegime regime, std::string_view text,
                std::vector<std::string_view>* words);

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_BPE_PRETOKENIZER_H_
