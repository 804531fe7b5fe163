// Reading the JSON text a constrained walk produced, for the grammar/ tests and the grammar
// fuzzer: no gtest.
#ifndef KVSERVE_TESTS_GRAMMAR_JSON_TEXT_H_
#define KVSERVE_TESTS_GRAMMAR_JSON_TEXT_H_

#include <regex>
#include <string>

#include "nlohmann/json.hpp"

namespace kvserve::grammar_test {

// The JSON value `text` holds; a discarded value (is_discarded()) when it is not one JSON text.
// A JSON grammar allows any exponent (RFC 8259 leaves the range to the reader), but nlohmann
// refuses a number past the range of double ("9E999"): such a text is read with its exponents
// replaced by e0, which keeps its syntax. Strings must be valid UTF-8.
inline nlohmann::json ParseJsonText(const std::string& text) {
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    const std::string tamed = std::regex_replace(text, std::regex("[eE][-+]?[0-9]+"), "e0");
    value = nlohmann::json::parse(tamed, nullptr, /*allow_exceptions=*/false);
  }
  return value;
}

}  // namespace kvserve::grammar_test

#endif  // KVSERVE_TESTS_GRAMMAR_JSON_TEXT_H_
