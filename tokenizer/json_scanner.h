// An incremental JSON scanner: it reads one JSON value a byte at a time, as the text arrives, and
// tells where each value and object key begins and ends, so that a caller can cut a value out of
// text that is still being written (a tool call's arguments while the model writes them). It
// tracks what a byte means from the nesting of objects and lists, and from string and escape
// state, and decodes strings as they go.
//
// It checks the grammar (RFC 8259) as far as structure, strings, escapes and literals go. Numbers
// are only checked to be made of number characters, and text is not checked to be UTF-8: a
// caller that needs a valid value checks the finished text (nlohmann::json::accept).
//
// Thread-safety: not thread-safe; one per value.
#ifndef KVSERVE_TOKENIZER_JSON_SCANNER_H_
#define KVSERVE_TOKENIZER_JSON_SCANNER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

class JsonScanner {
 public:
  // What one byte did.
  struct Step {
    bool error = false;   // the text is not JSON; the scanner stays failed
    bool taken = true;    // false: the byte ended a number before it; feed it again
    bool begins = false;  // the byte begins a value or a key
    bool ends = false;    // the byte is the last of a value or a key (a number: the one before)
    bool key = false;     // what begins or ends is an object's key
    int depth = 0;        // objects and lists around what begins or ends (0: the whole value)
  };

  // Reads the next byte. REQUIRES: !done() && !failed().
  Step Feed(char c);

  // The whole value has been read (a number at the top ends only at a byte after it).
  bool done() const { return expect_ == Expect::kNothing; }
  bool failed() const { return failed_; }

  // The decoded text of the string (value or key) being read, or of the last one read; an
  // escape counts once whole (a \u surrogate pair once both halves are in).
  const std::string& string_value() const { return string_value_; }

 private:
  enum class Expect {
    kValue,         // a value (the top one, or after ':' or ',' in a list)
    kValueOrClose,  // after '['
    kKeyOrClose,    // after '{'
    kKey,           // after ',' in an object
    kColon,
    kCommaOrClose,  // after a value inside an object or list
    kNothing,       // the whole value has been read
  };
  enum class Token { kNone, kString, kEscape, kUnicodeEscape, kNumber, kLiteral };

  Step BeginValue(char c);
  Step EndValue(Step step);  // what comes after a value ends
  Step StringByte(char c);
  Step Fail();
  int depth() const { return static_cast<int>(open_.size()); }

  std::vector<char> open_;  // '{' or '[' for each container around the position
  Expect expect_ = Expect::kValue;
  Token token_ = Token::kNone;
  bool in_key_ = false;
  bool failed_ = false;
  std::string_view literal_rest_;  // kLiteral: the letters still to come
  int hex_digits_ = 0;             // kUnicodeEscape: digits read so far
  uint32_t code_unit_ = 0;         // kUnicodeEscape: their value
  uint32_t high_surrogate_ = 0;    // a \u high surrogate waiting for its low half, or 0
  std::string string_value_;
};

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_JSON_SCANNER_H_
