#include "tokenizer/tool_call_parser.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tokenizer/tool_call_stream_parser.h"

namespace kvserve {
namespace {

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
  if (source.find(kHermesToolCallOpen) != std::string_view::npos) return ToolCallFormat::kHermes;
  if (source.find(kMistralToolCallMarker) != std::string_view::npos)
    return ToolCallFormat::kMistral;
  if (source.find("<|start_header_id|>") != std::string_view::npos &&
      source.find("\"parameters\"") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

ToolCallFormat ServedToolCallFormat(const ChatTemplate& chat,
                                    std::string_view chat_template_source) {
  if (!chat.renders_tools()) return ToolCallFormat::kHermes;
  return DetectToolCallFormat(chat_template_source);
}

ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text) {
  return ToolCallStreamParser(format).Parse(text);
}

ParsedToolCalls ParseToolCallList(std::string_view json) {
  return ToolCallStreamParser::CallList().Parse(json);
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
