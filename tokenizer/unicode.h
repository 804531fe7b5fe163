// UTF-8 and Unicode helpers for the tokenizers: decoding and encoding code points, the general
// categories the pre-tokenizer regexes ask about (\p{L}, \p{N}, \s), the GPT-2 byte-level
// alphabet (each byte spelled as one printable code point), and UTF-8 repair that works the same
// on a whole string and on a stream (so streamed text deltas concatenate to the whole decode).
//
// Thread-safety: free functions over constant tables; all are safe to call concurrently.
#ifndef KVSERVE_TOKENIZER_UNICODE_H_
#define KVSERVE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace kvserve {

inline constexpr uint32_t kInvalidCodepoint = 0xFFFFFFFF;

// Decodes the code point starting at text[*pos] and advances *pos past it. A byte that does not
// start a well-formed sequence (overlong, surrogate, truncated, > U+10FFFF) yields
// kInvalidCodepoint and advances by one byte.
// REQUIRES: *pos < text.size().
uint32_t DecodeUtf8(std::string_view text, size_t* pos);

// Appends the UTF-8 encoding of `codepoint` (REQUIRES: <= 0x10FFFF, not a surrogate).
void AppendUtf8(uint32_t codepoint, std::string* out);

// Unicode general categories L* and N*, and the White_Space property (what \s matches).
bool IsLetter(uint32_t codepoint);
bool IsNumber(uint32_t codepoint);
bool IsWhitespace(uint32_t codepoint);

// GPT-2 byte-level alphabet: the UTF-8 spelling of the code point that stands for `byte`.
const std::string& ByteLevelPiece(uint8_t byte);
// The byte that code point `codepoint` stands for, or -1 when it is not in the alphabet.
int ByteLevelByte(uint32_t codepoint);

// Appends `bytes` to *out as valid UTF-8: each ill-formed subsequence (maximal subpart, as
// Unicode recommends) becomes U+FFFD. When `final` is false a trailing sequence that is still
// incomplete but could become valid is not consumed. Returns the number of bytes consumed.
// Feeding a stream in pieces (final only on the last) gives the same output as one call.
size_t AppendValidUtf8(std::string_view bytes, bool final, std::string* out);

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(absl::string_view text);

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_UNICODE_H_
