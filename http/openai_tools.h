// The tool and structured-output parts of an OpenAI-style request (openai_mapping.h maps the
// rest): a chat message's tool_calls / tool_call_id / name, the request's tools, tool_choice and
// parallel_tool_calls, and structured output in every form clients send it (OpenAI's
// response_format, vLLM's structured_outputs and guided_*). Each takes the request's fields and
// fills the proto; errors are INVALID_ARGUMENT naming the field, as the rest of the mapping's.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_HTTP_OPENAI_TOOLS_H_
#define KVSERVE_HTTP_OPENAI_TOOLS_H_

#include <string>

#include "absl/status/status.h"
#include "http/openai_json.h"
#include "http/openai_mapping.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/sampling.pb.h"

namespace kvserve::openai {

// A message's tool_calls ([{id, type: "function", function: {name, arguments}}]), tool_call_id
// and name, when present; `path` names the message ("messages[2]"). The rules on them (names,
// JSON arguments, roles) are the validation library's.
absl::Status ToolMessageFields(const Fields& fields, const std::string& path,
                               kvserve::v1::ChatMessage* out);

// tools: [{type: "function", function: {name, description, parameters}}] into the chat.
absl::Status Tools(const Fields& fields, kvserve::v1::ChatConversation* chat);

// tool_choice and parallel_tool_calls. "auto" (the default with tools) parses the output for
// the model's tool calls; "none" renders the tools but returns text. "required" and a named
// function constrain the output (structured output, as vLLM does it): a named function's output
// is its arguments object (schema: its parameters); "required" gives a JSON list of calls
// [{"name", "parameters"}], one call at least and at most as many as there are tools (exactly
// one without parallel_tool_calls), each valid for its function: the list always ends, and the
// response finishes with "tool_calls". `*constraint` gets that schema's JSON text.
absl::Status ToolChoice(const Fields& fields, const kvserve::v1::ChatConversation& chat,
                        OpenAiRequest* out, std::string* constraint);

// Structured output, in any of the forms clients send it (one at most):
//   OpenAI: response_format {"type": "json_object"} | {"type": "json_schema", "json_schema":
//           {"name", "schema", "strict"}} | {"type": "text"} (free);
//   vLLM:   structured_outputs {"json": schema, "regex", "choice", "grammar", "json_object"},
//           and its older guided_json / guided_regex / guided_choice / guided_grammar.
absl::Status StructuredOutput(const Fields& fields, kvserve::v1::SamplingParams* sampling);

}  // namespace kvserve::openai

#endif  // KVSERVE_HTTP_OPENAI_TOOLS_H_
