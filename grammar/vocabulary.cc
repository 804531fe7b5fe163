// GrammarVocabulary from a Tokenizer, and its checks.
#include "grammar/vocabulary.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tokenizer/tokenizer.h"

namespace kvserve {

absl::Status ValidateVocabulary(const GrammarVocabulary& vocabulary) {
  const int64_t num_tokens = static_cast<int64_t>(vocabulary.token_bytes.size());
  if (vocabulary.vocab_size <= 0 || vocabulary.vocab_size < num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("grammar vocabulary: vocab_size ",
                                                   vocabulary.vocab_size, " is below the ",
                                                   num_tokens, " tokens of the tokenizer"));
  }
  for (int32_t id : vocabulary.stop_token_ids) {
    if (id < 0 || id >= vocabulary.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("grammar vocabulary: stop token id ", id,
                                                     " is outside [0, ", vocabulary.vocab_size,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<GrammarVocabulary> VocabularyFromTokenizer(
    const Tokenizer& tokenizer, int32_t vocab_size, absl::Span<const int32_t> stop_token_ids) {
  GrammarVocabulary vocabulary;
  vocabulary.vocab_size = vocab_size;
  vocabulary.stop_token_ids.assign(stop_token_ids.begin(), stop_token_ids.end());
  vocabulary.token_bytes.resize(tokenizer.vocab_size());
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    // Unused slots spell placeholders ("<unused3>") that a grammar must not count as text;
    // AppendTokenBytes with skip_special leaves control and unknown tokens empty.
    if (tokenizer.Kind(id) == TokenKind::kUnused) continue;
    tokenizer.AppendTokenBytes(id, /*skip_special=*/true, &vocabulary.token_bytes[id]);
  }
  KVSERVE_RETURN_IF_ERROR(ValidateVocabulary(vocabulary));
  return vocabulary;
}

}  // namespace kvserve
