#include "tokenizer/python_text.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

using Json = nlohmann::ordered_json;

// The separators json.dumps uses: (", ", ": ") on one line, (",", ": ") with an indent.
struct Separators {
  std::string item;
  std::string key;
};

// float.__repr__ as json.dumps writes it; nlohmann's shortest round-trip form is the same for
// finite values ("0.1", "100.0", "1e+16", "1e-05").
std::string FloatRepr(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return Json(value).dump();
}

void Dump(const Json& value, const PythonJsonOptions& options, const Separators& separators,
          int level, std::string* out) {
  const auto newline = [&](int at_level) {
    if (!options.indent.has_value()) return;
    out->push_back('\n');
    for (int i = 0; i < at_level; ++i) out->append(*options.indent);
  };
  switch (value.type()) {
    case Json::value_t::array: {
      if (value.empty()) {
        out->append("[]");
        return;
      }
      out->push_back('[');
      newline(level + 1);
      bool first = true;
      for (const Json& item : value) {
        if (!first) {
          out->append(separators.item);
          newline(level + 1);
        }
        first = false;
        Dump(item, options, separators, level + 1, out);
      }
      newline(level);
      out->push_back(']');
      return;
    }
    case Json::value_t::object: {
      if (value.empty()) {
        out->append("{}");
        return;
      }
      std::vector<const std::string*> keys;
      for (const auto& [key, unused] : value.items()) keys.push_back(&key);
      if (options.sort_keys) {
        std::sort(keys.begin(), keys.end(),
                  [](const std::string* a, const std::string* b) { return *a < *b; });
      }
      out->push_back('{');
      newline(level + 1);
      for (size_t i = 0; i < keys.size(); ++i) {
        if (i > 0) {
          out->append(separators.item);
          newline(level + 1);
        }
        out->append(Json(*keys[i]).dump(-1, ' ', options.ensure_ascii));
        out->append(separators.key);
        Dump(value.at(*keys[i]), options, separators, level + 1, out);
      }
      newline(level);
      out->push_back('}');
      return;
    }
    case Json::value_t::number_float:
      out->append(FloatRepr(value.get<double>()));
      return;
    default:  // null, booleans, integers, strings: JSON spells them as Python does
      out->append(value.dump(-1, ' ', options.ensure_ascii));
  }
}

bool IsPythonSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The code points of `text`, each with its byte offset.
struct Codepoint {
  uint32_t value;
  size_t begin;
  size_t end;
};

std::vector<Codepoint> Codepoints(std::string_view text) {
  std::vector<Codepoint> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t begin = pos;
    const uint32_t c = DecodeUtf8(text, &pos);
    out.push_back({c, begin, pos});
  }
  return out;
}

}  // namespace

std::string PythonJsonDumps(const nlohmann::ordered_json& value, const PythonJsonOptions& options) {
  Separators separators{options.indent.has_value() ? "," : ", ", ": "};
  if (options.item_separator.has_value()) separators.item = *options.item_separator;
  if (options.key_separator.has_value()) separators.key = *options.key_separator;
  std::string out;
  Dump(value, options, separators, 0, &out);
  return out;
}

std::string_view PythonStrip(std::string_view text, std::optional<std::string_view> chars) {
  std::vector<uint32_t> strip_set;
  if (chars.has_value()) {
    for (const Codepoint& c : Codepoints(*chars)) strip_set.push_back(c.value);
  }
  const auto strips = [&](uint32_t c) {
    if (c == kInvalidCodepoint) return false;
    if (!chars.has_value()) return IsPythonSpace(c);
    return std::find(strip_set.begin(), strip_set.end(), c) != strip_set.end();
  };
  const std::vector<Codepoint> codepoints = Codepoints(text);
  size_t first = 0;
  while (first < codepoints.size() && strips(codepoints[first].value)) ++first;
  size_t last = codepoints.size();
  while (last > first && strips(codepoints[last - 1].value)) --last;
  if (first == last) return text.substr(0, 0);
  return text.substr(codepoints[first].begin, codepoints[last - 1].end - codepoints[first].begin);
}

}  // namespace kvserve
