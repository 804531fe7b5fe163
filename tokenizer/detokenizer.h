// IncrementalDetokenizer: turns a stream of generated token ids into text deltas for streaming.
// A delta never ends inside a UTF-8 character: bytes of a character split across tokens (byte-level
// BPE, SentencePiece <0xXX> fallback) are held back until it is complete; ill-formed bytes become
// U+FFFD exactly where Tokenizer::Decode puts them; SentencePiece's leading space is dropped once,
// at the start. The concatenation of all Push() results and Flush() equals
// tokenizer.Decode(all ids, skip_special).
//
// Thread-safety: one instance per sequence, used by one thread at a time.
#ifndef KVSERVE_TOKENIZER_DETOKENIZER_H_
#define KVSERVE_TOKENIZER_DETOKENIZER_H_

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace kvserve {

class IncrementalDetokenizer {
 public:
  // `tokenizer` is not owned and must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Adds one token; returns the text that became complete (possibly empty).
  std::string Push(int32_t id);

  // Ends the stream: returns what is still held back (an incomplete character becomes U+FFFD).
  std::string Flush();

  // Bytes held back, waiting for the rest of a character (0-3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  const bool skip_special_;
  bool at_start_ = true;  // nothing produced yet: the leading-space rule still applies
  std::string pending_;   // raw bytes not yet emitted
};

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_DETOKENIZER_H_
