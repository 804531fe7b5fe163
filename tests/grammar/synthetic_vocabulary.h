// A small synthetic vocabulary for the grammar/ tests and the grammar fuzzer: no model file, no
// gtest.
#ifndef KVSERVE_TESTS_GRAMMAR_SYNTHETIC_VOCABULARY_H_
#define KVSERVE_TESTS_GRAMMAR_SYNTHETIC_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "grammar/vocabulary.h"

namespace kvserve::grammar_test {

// Every printable ASCII character, newline and tab as one token each, a few longer tokens, one
// control token (no bytes), an EOS, and 7 ids of padding past the tokens (vocab_size 121 is not
// a multiple of 32).
struct Synthetic {
  GrammarVocabulary vocabulary;
  int32_t eos_id = -1;
  int32_t control_id = -1;
};

inline Synthetic SyntheticVocabulary() {
  Synthetic s;
  std::vector<std::string>& tokens = s.vocabulary.token_bytes;
  for (int c = 0x20; c < 0x7F; ++c) tokens.push_back(std::string(1, static_cast<char>(c)));
  for (const char* t : {"\n", "\t", "true", "false", "null", "{\"", "\":", "\",", "abc", "123",
                        "yes", "no", "  ", "\"}"}) {
    tokens.push_back(t);
  }
  s.control_id = static_cast<int32_t>(tokens.size());
  tokens.push_back("");
  s.eos_id = static_cast<int32_t>(tokens.size());
  tokens.push_back("");
  s.vocabulary.vocab_size = static_cast<int32_t>(tokens.size()) + 7;
  s.vocabulary.stop_token_ids = {s.eos_id};
  return s;
}

}  // namespace kvserve::grammar_test

#endif  // KVSERVE_TESTS_GRAMMAR_SYNTHETIC_VOCABULARY_H_
