// Tool calls in model output: which format a model writes them in (told apart by its chat
// template, which teaches the model the format) and the parser that turns a finished output
// into OpenAI-style calls (tool_call_stream_parser.h reads them as they are written; these are
// that parser given the whole output). Three families:
//   kHermes      Hermes 2/3, Qwen 2.5/3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
//                one element per call; the text before the first one is the content.
//   kLlama3Json  Llama 3.1/3.2: the whole output is {"name": ..., "parameters": {...}}
//                (optionally after <|python_tag|>), several joined by ';'.
//   kMistral     Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] after the content.
// A call's arguments are the text of its arguments object as the model wrote it. An output that
// does not hold well-formed calls in its model's format is content only: the caller answers it
// as text (finish_reason stays what generation said).
//
// Thread-safety: pure functions.
#ifndef KVSERVE_TOKENIZER_TOOL_CALL_PARSER_H_
#define KVSERVE_TOKENIZER_TOOL_CALL_PARSER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace kvserve {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

// The formats' markers: what a template teaches (DetectToolCallFormat) and what an output holds
// (tool_call_stream_parser.h).
inline constexpr std::string_view kHermesToolCallOpen = "<tool_call>";
inline constexpr std::string_view kHermesToolCallClose = "</tool_call>";
inline constexpr std::string_view kLlama3PythonTag = "<|python_tag|>";
inline constexpr std::string_view kMistralToolCallMarker = "[TOOL_CALLS]";

// "" (none), "hermes", "llama3_json", "mistral": ModelInfo.tool_call_format.
std::string_view ToolCallFormatName(ToolCallFormat format);
// The inverse; nullopt for an unknown name.
std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name);

// The format a chat template teaches, from the markers in its source; kNone when it teaches
// none of the three.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template_source);

// The format the model is asked to write calls in when served with `chat` (whose source is
// `chat_template_source`): kHermes when the template does not render tools (the fallback of
// tool_prompt_fallback.h teaches it), else what the template teaches.
ToolCallFormat ServedToolCallFormat(const ChatTemplate& chat,
                                    std::string_view chat_template_source);

struct ParsedToolCalls {
  std::string content;              // the text besides the calls, trimmed of white space
  std::vector<ChatToolCall> calls;  // in order; ids empty (MakeToolCallId); arguments as written
};

// The calls in `text`, a whole output. No calls (content = text as given) when the format is
// kNone, the output has no call marker, or a call is not JSON with a string "name" and an
// object (or JSON-text string) of arguments.
ParsedToolCalls ParseToolCalls(ToolCallFormat format, std::string_view text);

// A JSON list of calls [{"name", "arguments" or "parameters"}, ...] (or one such object): the
// form of Mistral's calls after its marker, and of output constrained to tool_choice
// "required". No calls (content = json) unless every element is a call.
ParsedToolCalls ParseToolCallList(std::string_view json);

// An id for call `index` of a response, unique per (seed, index): "call_" and 24 hex digits,
// or for kMistral the 9 letters and digits its template requires of an id.
std::string MakeToolCallId(ToolCallFormat format, uint64_t seed, int index);

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_TOOL_CALL_PARSER_H_
