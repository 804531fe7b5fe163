#include "tokenizer/tool_call_parser.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace kvserve {
namespace {

using Json = nlohmann::json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralMarker = "[TOOL_CALLS]";

// (absl::string_view is not std::string_view in the Abseil this builds with.)
std::string_view Trim(std::string_view text) {
  const absl::string_view trimmed =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  return std::string_view(trimmed.data(), trimmed.size());
}

// One call from a parsed JSON object: {"name": string, <arguments_key>: object or JSON text}.
// "arguments" and "parameters" are both accepted (models mix them up).
std::optional<ChatToolCall> CallOf(const Json& object) {
  if (!object.is_object()) return std::nullopt;
  auto name = object.find("name");
  if (name == object.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  auto arguments = object.find("arguments");
  if (arguments == object.end()) arguments = object.find("parameters");
  ChatToolCall call{.id = "", .name = name->get<std::string>(), .arguments = "{}"};
  if (arguments == object.end() || arguments->is_null()) return call;
  if (arguments->is_object()) {
    call.arguments = arguments->dump();
  } else if (arguments->is_string()) {  // already JSON text: keep it if it is an object
    Json parsed = Json::parse(arguments->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return std::nullopt;
    call.arguments = parsed.dump();
  } else {
    return std::nullopt;
  }
  return call;
}

std::optional<Json> ParseJson(std::string_view text) {
  Json parsed = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return std::nullopt;
  return parsed;
}

ParsedToolCalls ContentOnly(std::string_view text) { return {std::string(text), {}}; }

ParsedToolCalls ParseHermes(std::string_view text) {
  const size_t first = text.find(kHermesOpen);
  if (first == std::string_view::npos) return ContentOnly(text);
  ParsedToolCalls out{std::string(Trim(text.substr(0, first))), {}};
  size_t at = first;
  while (at != std::string_view::npos) {
    const size_t body = at + kHermesOpen.size();
    size_t close = text.find(kHermesClose, body);
    // A last call cut off before its closing tag (max_tokens, a stop string) still counts when
    // its JSON is whole.
    const std::string_view json =
        close == std::string_view::npos ? text.substr(body) : text.substr(body, close - body);
    std::optional<Json> parsed = ParseJson(Trim(json));
    std::optional<ChatToolCall> call = parsed ? CallOf(*parsed) : std::nullopt;
    if (!call) return ContentOnly(text);
    out.calls.push_back(*std::move(call));
    if (close == std::string_view::npos) break;
    const size_t next = text.find(kHermesOpen, close + kHermesClose.size());
    // Only white space may separate calls; other text after the calls is content.
    const std::string_view between = text.substr(
        close + kHermesClose.size(),
        (next == std::string_view::npos ? text.size() : next) - close - kHermesClose.size());
    if (!Trim(between).empty()) {
      if (!out.content.empty()) out.content += "\n";
      out.content += std::string(Trim(between));
    }
    at = next;
  }
  return out;
}

ParsedToolCalls ParseLlama3Json(std::string_view text) {
  std::string_view body = Trim(text);
  if (body.substr(0, kPythonTag.size()) == kPythonTag) body = Trim(body.substr(kPythonTag.size()));
  if (body.empty() || body.front() != '{') return ContentOnly(text);
  ParsedToolCalls out;
  // Whole output first (';' may appear inside arguments), then ';'-joined calls.
  if (std::optional<Json> whole = ParseJson(body)) {
    std::optional<ChatToolCall> call = CallOf(*whole);
    if (!call) return ContentOnly(text);
    out.calls.push_back(*std::move(call));
    return out;
  }
  for (absl::string_view part : absl::StrSplit(absl::string_view(body.data(), body.size()), ';')) {
    std::optional<Json> parsed = ParseJson(Trim(std::string_view(part.data(), part.size())));
    std::optional<ChatToolCall> call = parsed ? CallOf(*parsed) : std::nullopt;
    if (!call) return ContentOnly(text);
    out.calls.push_back(*std::move(call));
  }
  return out;
}

ParsedToolCalls ParseMistral(std::string_view text) {
  const size_t marker = text.find(kMistralMarker);
  if (marker == std::string_view::npos) return ContentOnly(text);
  ParsedToolCalls out = ParseToolCallList(text.substr(marker + kMistralMarker.size()));
  if (out.calls.empty()) return ContentOnly(text);
  out.content = std::string(Trim(text.substr(0, marker)));
  return out;
}

// SplitMix64: a well-mixed 64-bit value of (seed, index).
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::string_view ToolCallFormatName(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone:
      return "";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kLlama3Json:
      return "llama3_json";
    case ToolCallFormat::kMistral:
      return "mistral";
  }
  return "";
}

std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name) {
  for (ToolCallFormat format : {ToolCallFormat::kNone, ToolCallFormat::kHermes,
                                ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    if (ToolCallFormatName(format) == name) return format;
  }
  return std::nullopt;
}

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  if (source.find(kHermesOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find(kMistralMarker) != std::string_view::npos) return ToolCallFormat::kMistral;
  if (source.find("<|start_header_id|>") != std::string_view::npos &&
      source.find("\"parameters\"") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

ParsedToolCalls ParseToolCallList(std::string_view json) {
  std::optional<Json> parsed = ParseJson(Trim(json));
  if (!parsed) return ContentOnly(json);
  ParsedToolCalls out;
  if (parsed->is_object()) {  // one call without the list
    std::optional<ChatToolCall> call = CallOf(*parsed);
    if (!call) return ContentOnly(json);
    out.calls.push_back(*std::move(call));
    return out;
  }
  if (!parsed->is_array() || parsed->empty()) return ContentOnly(json);
  for (const Json& item : *parsed) {
    std::optional<ChatToolCall> call = CallOf(item);
    if (!call) return ContentOnly(json);
    out.calls.push_back(*std::move(call));
  }
  return out;
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text) {
  switch (format) {
    case ToolCallFormat::kHermes:
      return ParseHermes(text);
    case ToolCallFormat::kLlama3Json:
      return ParseLlama3Json(text);
    case ToolCallFormat::kMistral:
      return ParseMistral(text);
    case ToolCallFormat::kNone:
      break;
  }
  return ContentOnly(text);
}

std::string MakeToolCallId(ToolCallFormat format, uint64_t seed, int index) {
  uint64_t bits = Mix(seed ^ Mix(static_cast<uint64_t>(index)));
  if (format == ToolCallFormat::kMistral) {
    constexpr std::string_view kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string id(9, ' ');
    for (char& c : id) {
      c = kAlphabet[bits % kAlphabet.size()];
      bits /= kAlphabet.size();
    }
    return id;
  }
  return absl::StrCat("call_", absl::Hex(bits, absl::kZeroPad16),
                      absl::Hex(Mix(bits) >> 32, absl::kZeroPad8));
}

}  // namespace kvserve
