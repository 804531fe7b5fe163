// Unicode general-category tables used by the tokenizer's pre-tokenizer: sorted, disjoint,
// inclusive code point ranges. unicode_tables.cc is generated (see its first line); query them
// through tokenizer/unicode.h, not directly.
//
// Thread-safety: constant data.
#ifndef KVSERVE_TOKENIZER_UNICODE_TABLES_H_
#define KVSERVE_TOKENIZER_UNICODE_TABLES_H_

#include <cstddef>
#include <cstdint>

namespace kvserve::unicode_internal {

struct CodepointRange {
  uint32_t first;
  uint32_t last;  // inclusive
};

extern const CodepointRange kLetterRanges[];  // [kLetterRangesSize], general category L*
extern const size_t kLetterRangesSize;
extern const CodepointRange kNumberRanges[];  // [kNumberRangesSize], general category N*
extern const size_t kNumberRangesSize;

}  // namespace kvserve::unicode_internal

#endif  // KVSERVE_TOKENIZER_UNICODE_TABLES_H_
