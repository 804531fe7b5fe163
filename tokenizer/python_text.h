// What a chat template computes with Python under transformers, for the functions where minja's
// own versions write other bytes: json.dumps (transformers' `tojson` filter) and str.strip
// (Jinja2's `trim`). ChatTemplate (tokenizer/chat_template.cc) installs them in place of minja's.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_TOKENIZER_PYTHON_TEXT_H_
#define KVSERVE_TOKENIZER_PYTHON_TEXT_H_

#include <optional>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace kvserve {

// json.dumps's keyword arguments (transformers passes ensure_ascii=False by default).
struct PythonJsonOptions {
  bool ensure_ascii = false;
  // nullopt: everything on one line; else a newline and this string per level (indent=2: "  ").
  std::optional<std::string> indent = std::nullopt;
  // nullopt: (", ", ": ") on one line, ("," , ": ") with an indent.
  std::optional<std::string> item_separator = std::nullopt;
  std::optional<std::string> key_separator = std::nullopt;
  bool sort_keys = false;
};

// json.dumps(value, ...) byte for byte: Python's separators and empty containers ("[]", "{}"),
// keys in insertion order unless sort_keys, floats as repr writes them (NaN, Infinity), strings
// escaped as Python escapes them. Throws nlohmann::json::exception on invalid UTF-8.
std::string PythonJsonDumps(const nlohmann::ordered_json& value, const PythonJsonOptions& options);

// str.strip(chars): `text` without the leading and trailing code points that are in `chars`, or
// (chars nullopt) that Python counts as whitespace (str.isspace: ASCII and Unicode spaces,
// U+0085, U+2028, ...). Invalid UTF-8 bytes are never stripped.
std::string_view PythonStrip(std::string_view text,
                             std::optional<std::string_view> chars = std::nullopt);

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_PYTHON_TEXT_H_
