#include "tokenizer/bpe_pretokenizer.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

// The text as code points with their byte offsets; the matchers below work on [begin, end).
struct CodepointText {
  std::vector<uint32_t> codepoints;  // [n]
  std::vector<size_t> offsets;       // [n + 1], byte offset of each code point, then text size

  explicit CodepointText(std::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
      offsets.push_back(pos);
      codepoints.push_back(DecodeUtf8(text, &pos));
    }
    offsets.push_back(text.size());
  }
};

bool IsNewline(uint32_t c) { return c == '\r' || c == '\n'; }
bool IsOther(uint32_t c) { return !IsWhitespace(c) && !IsLetter(c) && !IsNumber(c); }
uint32_t Lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

class Matcher {
 public:
  Matcher(const std::vector<uint32_t>& cp, size_t end) : cp_(cp), end_(end) {}

  // Length of 's 't 're 've 'm 'll 'd at i, or 0.
  size_t Contraction(size_t i, bool ignore_case) const {
    if (cp_[i] != '\'' || i + 1 >= end_) return 0;
    const auto at = [&](size_t k) { return ignore_case ? Lower(cp_[k]) : cp_[k]; };
    const uint32_t a = at(i + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= end_) return 0;
    const uint32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
  }

  template <typename Pred>
  size_t Run(size_t i, Pred pred, size_t max_length = SIZE_MAX) const {
    size_t k = i;
    while (k < end_ && k - i < max_length && pred(cp_[k])) ++k;
    return k - i;
  }

  // " ?X+" for a class X: the length, or 0.
  template <typename Pred>
  size_t OptionalSpaceThen(size_t i, Pred pred) const {
    const size_t space = cp_[i] == ' ' && i + 1 < end_ ? 1 : 0;
    const size_t run = Run(i + space, pred);
    return run > 0 ? space + run : 0;  // without the space the class cannot match a space either
  }

  // "\s+(?!\S)|\s+" at a whitespace code point i.
  size_t TrailingWhitespace(size_t i) const {
    const size_t run = Run(i, IsWhitespace);
    if (i + run == end_ || run == 1) return run;
    return run - 1;  // leave the last space to prefix the next word
  }

  size_t Gpt2(size_t i) const {
    if (size_t n = Contraction(i, false)) return n;
    if (size_t n = OptionalSpaceThen(i, IsLetter)) return n;
    if (size_t n = OptionalSpaceThen(i, IsNumber)) return n;
    if (size_t n = OptionalSpaceThen(i, IsOther)) return n;
    return TrailingWhitespace(i);
  }

  size_t Llama3(size_t i, size_t max_digits) const {
    if (size_t n = Contraction(i, true)) return n;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    const uint32_t c = cp_[i];
    const size_t lead = !IsNewline(c) && !IsLetter(c) && !IsNumber(c) && i + 1 < end_ ? 1 : 0;
    if (size_t run = Run(i + lead, IsLetter)) return lead + run;
    if (size_t run = Run(i, IsNumber, max_digits)) return run;
    // " ?[^\s\p{L}\p{N}]+[\r\n]*"
    if (size_t n = OptionalSpaceThen(i, IsOther)) return n + Run(i + n, IsNewline);
    // "\s*[\r\n]+": the whitespace run up to its last newline
    const size_t run = Run(i, IsWhitespace);
    for (size_t k = i + run; k > i; --k) {
      if (IsNewline(cp_[k - 1])) return k - i;
    }
    return TrailingWhitespace(i);
  }

 private:
  const std::vector<uint32_t>& cp_;
  size_t end_;
};

}  // namespace

absl::StatusOr<PreTokenizerRegime> RegimeFromGgufName(std::string_view name) {
  if (name == "gpt2" || name == "gpt-2" || name == "default") return PreTokenizerRegime::kGpt2;
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "codeshell") {
    return PreTokenizerRegime::kSmolLm;
  }
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "smaug-bpe" ||
      name == "dbrx" || name == "falcon3") {
    return PreTokenizerRegime::kLlama3;
  }
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizerRegime::kQwen2;
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported pre-tokenizer '", std::string(name),
      "' (tokenizer.ggml.pre); supported: gpt2, smollm, llama-bpe, qwen2 and their aliases"));
}

void SplitWords(PreTokenizerRegime regime, std::string_view text,
                std::vector<std::string_view>* words) {
  if (text.empty()) return;
  const CodepointText cps(text);
  const size_t n = cps.codepoints.size();
  const auto emit = [&](size_t begin, size_t end) {
    words->push_back(text.substr(cps.offsets[begin], cps.offsets[end] - cps.offsets[begin]));
  };
  size_t i = 0;
  while (i < n) {
    if (regime == PreTokenizerRegime::kSmolLm) {
      if (IsNumber(cps.codepoints[i])) {
        emit(i, i + 1);
        ++i;
        continue;
      }
      // The GPT-2 split runs on each stretch between digits as if it were the whole text.
      size_t segment_end = i;
      while (segment_end < n && !IsNumber(cps.codepoints[segment_end])) ++segment_end;
      const Matcher matcher(cps.codepoints, segment_end);
      while (i < segment_end) {
        const size_t length = std::max<size_t>(1, matcher.Gpt2(i));
        emit(i, i + length);
        i += length;
      }
      continue;
    }
    const Matcher matcher(cps.codepoints, n);
    size_t length = 0;
    switch (regime) {
      case PreTokenizerRegime::kGpt2:
      case PreTokenizerRegime::kSmolLm:
        length = matcher.Gpt2(i);
        break;
      case PreTokenizerRegime::kLlama3:
        length = matcher.Llama3(i, 3);
        break;
      case PreTokenizerRegime::kQwen2:
        length = matcher.Llama3(i, 1);
        break;
    }
    length = length == 0 ? 1 : length;  // unreachable: every code point starts some branch
    emit(i, i + length);
    i += length;
  }
}

}  // namespace kvserve
