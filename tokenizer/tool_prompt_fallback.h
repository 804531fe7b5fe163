// The tool prompt of a chat template that has none: a model-agnostic fallback so that a model
// whose template ignores `tools` (SmolLM2's, many base models') still sees the functions it may
// call and the calls it made. ChatTemplate::Render applies it when its probe found that the
// template does not render tools (or tool calls):
//   - tools: their definitions, one JSON object per line, go into the system prompt (appended to
//     the first message when it is a system message, else in a system message put first), with
//     one instruction: write each call as <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//     (the Hermes format, so ModelInfo.tool_call_format is "hermes" and the HTTP API parses
//     the calls back);
//   - an assistant turn's tool_calls, which such a template drops: written into its content in
//     that same format, after its text (so content none becomes text, never null), in place of
//     the calls.
// Tool results (role "tool") are left to the template.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_TOKENIZER_TOOL_PROMPT_FALLBACK_H_
#define KVSERVE_TOKENIZER_TOOL_PROMPT_FALLBACK_H_

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "tokenizer/chat_template.h"

namespace kvserve {

// The system prompt text that presents `tools` (OpenAI tool objects as JSON text, one per line
// as given) and the call format. REQUIRES: !tools.empty().
std::string FallbackToolSystemPrompt(absl::Span<const std::string> tools);

// `call` as the fallback asks the model to write it: <tool_call>\n{"name": ..., "arguments":
// ...}\n</tool_call>, the arguments as their JSON text.
std::string FallbackToolCallText(const ChatToolCall& call);

// `messages` with the fallback applied: the tools' system prompt when `inject_tools` (and tools
// are given), each assistant turn's calls written into its content (and taken out of
// tool_calls) when `inline_tool_calls`.
std::vector<ChatMessage> WithFallbackToolPrompt(absl::Span<const ChatMessage> messages,
                                                absl::Span<const std::string> tools,
                                                bool inject_tools, bool inline_tool_calls);

}  // namespace kvserve

#endif  // KVSERVE_TOKENIZER_TOOL_PROMPT_FALLBACK_H_
