#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

#include "tokenizer/unicode_tables.h"

namespace kvserve {
namespace {

using unicode_internal::CodepointRange;

// Length of the well-formed sequence at text[pos] (> 0, code point in *codepoint); or minus the
// length of its maximal ill-formed subpart (< 0); or 0 when the text ends inside a sequence that
// is well-formed so far.
int ScanSequence(std::string_view text, size_t pos, uint32_t* codepoint) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) {
    *codepoint = lead;
    return 1;
  }
  int length = 0;
  uint8_t second_low = 0x80;
  uint8_t second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_low = 0xA0;   // no overlongs
    if (lead == 0xED) second_high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_low = 0x90;   // no overlongs
    if (lead == 0xF4) second_high = 0x8F;  // nothing above U+10FFFF
  } else {
    return -1;
  }
  uint32_t value = lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    if (pos + i >= text.size()) return 0;
    const uint8_t next = byte(pos + i);
    const uint8_t low = i == 1 ? second_low : 0x80;
    const uint8_t high = i == 1 ? second_high : 0xBF;
    if (next < low || next > high) return -i;
    value = (value << 6) | (next & 0x3F);
  }
  *codepoint = value;
  return length;
}

bool InRanges(const CodepointRange* ranges, size_t size, uint32_t codepoint) {
  const CodepointRange* end = ranges + size;
  const CodepointRange* it = std::upper_bound(
      ranges, end, codepoint, [](uint32_t cp, const CodepointRange& r) { return cp < r.first; });
  return it != ranges && codepoint <= (it - 1)->last;
}

struct ByteLevelAlphabet {
  std::array<std::string, 256> pieces;  // [byte] -> UTF-8 of its stand-in code point
  std::array<int16_t, 512> bytes;       // [code point] -> byte, -1 when none (all are < 512)
};

const ByteLevelAlphabet& Alphabet() {
  static const ByteLevelAlphabet* alphabet = [] {
    auto* a = new ByteLevelAlphabet;
    a->bytes.fill(-1);
    uint32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes stand for themselves; the rest take code points from 256 up.
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t codepoint = printable ? b : next_extra++;
      AppendUtf8(codepoint, &a->pieces[b]);
      a->bytes[codepoint] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return *alphabet;
}

}  // namespace

uint32_t DecodeUtf8(std::string_view text, size_t* pos) {
  uint32_t codepoint = 0;
  const int length = ScanSequence(text, *pos, &codepoint);
  if (length <= 0) {
    *pos += 1;
    return kInvalidCodepoint;
  }
  *pos += length;
  return codepoint;
}

void AppendUtf8(uint32_t codepoint, std::string* out) {
  if (codepoint < 0x80) {
    out->push_back(static_cast<char>(codepoint));
  } else if (codepoint < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (codepoint >> 6)));
    out->push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else if (codepoint < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (codepoint >> 12)));
    out->push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (codepoint >> 18)));
    out->push_back(static_cast<char>(0x80 | ((codepoint >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((codepoint >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (codepoint & 0x3F)));
  }
}

bool IsLetter(uint32_t codepoint) {
  return InRanges(unicode_internal::kLetterRanges, unicode_internal::kLetterRangesSize, codepoint);
}

bool IsNumber(uint32_t codepoint) {
  return InRanges(unicode_internal::kNumberRanges, unicode_internal::kNumberRangesSize, codepoint);
}

bool IsWhitespace(uint32_t codepoint) {
  switch (codepoint) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return codepoint >= 0x2000 && codepoint <= 0x200A;
  }
}

const std::string& ByteLevelPiece(uint8_t byte) { return Alphabet().pieces[byte]; }

int ByteLevelByte(uint32_t codepoint) { return codepoint < 512 ? Alphabet().bytes[codepoint] : -1; }

size_t AppendValidUtf8(std::string_view bytes, bool final, std::string* out) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint32_t codepoint = 0;
    const int length = ScanSequence(bytes, pos, &codepoint);
    if (length > 0) {
      out->append(bytes.substr(pos, length));
      pos += length;
    } else if (length < 0) {
      out->append(kReplacement);
      pos += -length;
    } else if (!final) {
      break;  // an incomplete but so far well-formed tail: wait for more bytes
    } else {
      out->append(kReplacement);
      pos = bytes.size();
    }
  }
  return pos;
}

bool IsValidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      ++i;
      continue;
    }
    int length = 0;
    uint32_t code_point = 0;
    if ((byte & 0xE0) == 0xC0) {
      length = 2;
      code_point = byte & 0x1F;
    } else if ((byte & 0xF0) == 0xE0) {
      length = 3;
      code_point = byte & 0x0F;
    } else if ((byte & 0xF8) == 0xF0) {
      length = 4;
      code_point = byte & 0x07;
    } else {
      return false;
    }
    if (i + length > text.size()) return false;
    for (int k = 1; k < length; ++k) {
      const auto continuation = static_cast<unsigned char>(text[i + k]);
      if ((continuation & 0xC0) != 0x80) return false;
      code_point = (code_point << 6) | (continuation & 0x3F);
    }
    static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < kMinForLength[length] || code_point > 0x10FFFF ||
        (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

}  // namespace kvserve
