#include "tokenizer/json_scanner.h"

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool IsNumberByte(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsHighSurrogate(uint32_t unit) { return unit >= 0xD800 && unit <= 0xDBFF; }
bool IsLowSurrogate(uint32_t unit) { return unit >= 0xDC00 && unit <= 0xDFFF; }

}  // namespace

JsonScanner::Step JsonScanner::Fail() {
  failed_ = true;
  return Step{.error = true};
}

JsonScanner::Step JsonScanner::EndValue(Step step) {
  expect_ = open_.empty() ? Expect::kNothing : Expect::kCommaOrClose;
  return step;
}

JsonScanner::Step JsonScanner::BeginValue(char c) {
  const Step step{.begins = true, .depth = depth()};
  switch (c) {
    case '{':
      open_.push_back('{');
      expect_ = Expect::kKeyOrClose;
      return step;
    case '[':
      open_.push_back('[');
      expect_ = Expect::kValueOrClose;
      return step;
    case '"':
      token_ = Token::kString;
      in_key_ = false;
      string_value_.clear();
      return step;
    case 't':
      literal_rest_ = "rue";
      token_ = Token::kLiteral;
      return step;
    case 'f':
      literal_rest_ = "alse";
      token_ = Token::kLiteral;
      return step;
    case 'n':
      literal_rest_ = "ull";
      token_ = Token::kLiteral;
      return step;
    default:
      if (c == '-' || (c >= '0' && c <= '9')) {
        token_ = Token::kNumber;
        return step;
      }
      return Fail();
  }
}

JsonScanner::Step JsonScanner::StringByte(char c) {
  if (c == '"') {
    if (high_surrogate_ != 0) return Fail();
    token_ = Token::kNone;
    if (in_key_) {
      in_key_ = false;
      expect_ = Expect::kColon;
      return Step{.ends = true, .key = true, .depth = depth()};
    }
    return EndValue(Step{.ends = true, .depth = depth()});
  }
  if (high_surrogate_ != 0 && c != '\\') return Fail();  // a lone high surrogate
  if (c == '\\') {
    token_ = Token::kEscape;
    return Step{};
  }
  if (static_cast<unsigned char>(c) < 0x20) return Fail();  // control characters are escaped
  string_value_ += c;
  return Step{};
}

JsonScanner::Step JsonScanner::Feed(char c) {
  if (failed_ || done()) return Fail();
  switch (token_) {
    case Token::kString:
      return StringByte(c);
    case Token::kEscape: {
      if (c == 'u') {
        token_ = Token::kUnicodeEscape;
        hex_digits_ = 0;
        code_unit_ = 0;
        return Step{};
      }
      if (high_surrogate_ != 0) return Fail();
      constexpr std::string_view kEscaped = "\"\\/bfnrt";
      constexpr std::string_view kMeaning = "\"\\/\b\f\n\r\t";
      const size_t which = kEscaped.find(c);
      if (which == std::string_view::npos) return Fail();
      string_value_ += kMeaning[which];
      token_ = Token::kString;
      return Step{};
    }
    case Token::kUnicodeEscape: {
      const int digit = HexValue(c);
      if (digit < 0) return Fail();
      code_unit_ = code_unit_ * 16 + static_cast<uint32_t>(digit);
      if (++hex_digits_ < 4) return Step{};
      token_ = Token::kString;
      if (high_surrogate_ != 0) {
        if (!IsLowSurrogate(code_unit_)) return Fail();
        AppendUtf8(0x10000 + ((high_surrogate_ - 0xD800) << 10) + (code_unit_ - 0xDC00),
                   &string_value_);
        high_surrogate_ = 0;
      } else if (IsHighSurrogate(code_unit_)) {
        high_surrogate_ = code_unit_;
      } else if (IsLowSurrogate(code_unit_)) {
        return Fail();
      } else {
        AppendUtf8(code_unit_, &string_value_);
      }
      return Step{};
    }
    case Token::kNumber: {
      if (IsNumberByte(c)) return Step{};
      token_ = Token::kNone;
      Step step = EndValue(Step{.ends = true, .depth = depth()});
      step.taken = false;
      return step;
    }
    case Token::kLiteral:
      if (c != literal_rest_.front()) return Fail();
      literal_rest_.remove_prefix(1);
      if (!literal_rest_.empty()) return Step{};
      token_ = Token::kNone;
      return EndValue(Step{.ends = true, .depth = depth()});
    case Token::kNone:
      break;
  }
  if (IsJsonSpace(c)) return Step{};
  switch (expect_) {
    case Expect::kValue:
      return BeginValue(c);
    case Expect::kValueOrClose:
      if (c != ']') return BeginValue(c);
      open_.pop_back();
      return EndValue(Step{.ends = true, .depth = depth()});
    case Expect::kKeyOrClose:
      if (c == '}') {
        open_.pop_back();
        return EndValue(Step{.ends = true, .depth = depth()});
      }
      [[fallthrough]];
    case Expect::kKey:
      if (c != '"') return Fail();
      token_ = Token::kString;
      in_key_ = true;
      string_value_.clear();
      return Step{.begins = true, .key = true, .depth = depth()};
    case Expect::kColon:
      if (c != ':') return Fail();
      expect_ = Expect::kValue;
      return Step{};
    case Expect::kCommaOrClose: {
      const bool in_object = open_.back() == '{';
      if (c == ',') {
        expect_ = in_object ? Expect::kKey : Expect::kValue;
        return Step{};
      }
      if (c != (in_object ? '}' : ']')) return Fail();
      open_.pop_back();
      return EndValue(Step{.ends = true, .depth = depth()});
    }
    case Expect::kNothing:
      break;
  }
  return Fail();
}

}  // namespace kvserve
