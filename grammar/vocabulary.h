// GrammarVocabulary: what the grammar engine must know of a model's vocabulary. Each token is the
// bytes it adds to the output text; a token with no bytes (control tokens such as
// "<|im_start|>", unused slots) is never allowed by a grammar, only the stop tokens are, and only
// where the grammar may end. The model's logits may be wider than the tokenizer's vocabulary
// (padded embedding rows): ids from token_bytes.size() up to vocab_size are never allowed.
//
// A plain value type, built once per model.
#ifndef KVSERVE_GRAMMAR_VOCABULARY_H_
#define KVSERVE_GRAMMAR_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvserve {

class Tokenizer;

struct GrammarVocabulary {
  std::vector<std::string> token_bytes;  // [number of tokens]: raw bytes, not necessarily UTF-8
  int32_t vocab_size = 0;                // the logits width; >= token_bytes.size()
  std::vector<int32_t> stop_token_ids;   // EOS, end of turn: allowed once the grammar may end
};

// The vocabulary of `tokenizer` as the grammar engine sees it: each id's bytes as Decode would
// write them (byte-level symbols and SentencePiece "▁" / <0xXX> already turned into bytes);
// control, unknown and unused tokens have none. `vocab_size` is the model's logits width
// (>= tokenizer.vocab_size()); `stop_token_ids` are the model's EOS ids. INVALID_ARGUMENT when
// vocab_size is too small or a stop id is outside [0, vocab_size).
absl::StatusOr<GrammarVocabulary> VocabularyFromTokenizer(const Tokenizer& tokenizer,
                                                          int32_t vocab_size,
                                                          absl::Span<const int32_t> stop_token_ids);

// INVALID_ARGUMENT naming the problem when `vocabulary` breaks the rules above.
absl::Status ValidateVocabulary(const GrammarVocabulary& vocabulary);

}  // namespace kvserve

#endif  // KVSERVE_GRAMMAR_VOCABULARY_H_
