// kvserve.v1.GenerateResponse stream -> OpenAI response JSON: the response half of the
// OpenAI-compatible API, for one /v1/completions or /v1/chat/completions call.
//
// Non-streaming: Add() every message of every prompt's stream, then Body() is the one
// "text_completion" / "chat.completion" object with every choice and usage.
// Streaming: Chunks() turns each message into the "data:" payloads to send at once (one chunk
// per choice delta; chat sends the assistant role in each choice's first chunk), and
// UsageChunk() is the last chunk when stream_options.include_usage.
//
// finish_reason: STOP and STOP_STRING -> "stop", LENGTH -> "length", ABORT -> "abort";
// stop_reason (as vLLM) carries the matched stop string or stop token id.
// Tool calls (chat, OpenAiRequest.parse_tool_calls): the text is parsed in the model's format
// (tokenizer/tool_call_stream_parser.h); calls become message.tool_calls (content: the text
// besides them, or null) and a "stop" finish becomes "tool_calls". Streaming sends content as
// it comes except what may begin a call (from the format's marker on, and trailing white
// space), and each call as OpenAI's deltas while it is written: {index, id, type, function:
// {name, arguments: ""}} once its name is whole, then {index, function: {arguments}} pieces
// that join to the arguments Body() gives; then the finish_reason chunk (after content that
// came after the calls). Output that turns out
// not to be calls sends what was held back as content at once, as Body() gives it (deltas sent
// for a call that broke after its name stay sent; finish_reason is not "tool_calls" then).
// Logprobs: completions use {tokens, token_logprobs, top_logprobs, text_offset}; chat uses
// {content: [{token, logprob, bytes, top_logprobs}]}. A token that is not valid UTF-8 on its own
// (part of a character) is written "bytes:\xNN..." in token strings; -inf is written -9999.0.
// echo (completions): text is the prompt's text (the prompt string, or its tokens' text for
// token ids) and then the completion's; with logprobs the lists cover the prompt's tokens first
// (the first token's logprob and top_logprobs null), text_offset counting bytes from the
// prompt's start; with prompt_only the completion is left out (and from usage).
// prompt_logprobs (vLLM's format): a list with null for the first prompt token, then per token
// {"<token id>": {logprob, rank, decoded_token}} for it and its top alternatives; in each
// choice for completions, at the top level for chat.
//
// Thread-safety: not thread-safe; one per call.
#ifndef KVSERVE_HTTP_OPENAI_RESPONSE_H_
#define KVSERVE_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "http/openai_mapping.h"
#include "kvserve/v1/output.pb.h"
#include "tokenizer/tool_call_stream_parser.h"

namespace kvserve {

class OpenAiResponseBuilder {
 public:
  // `id` is the response id ("cmpl-..." / "chatcmpl-..."), `model` the name echoed back.
  OpenAiResponseBuilder(const OpenAiRequest& request, std::string id, std::string model,
                        int64_t created_unix_s);

  // Non-streaming: accumulates one message of prompt `prompt_index`'s stream.
  void Add(int prompt_index, const kvserve::v1::GenerateResponse& response);
  // The whole response body. REQUIRES: every stream ended OK and was Add()ed.
  std::string Body() const;

  // Streaming: the chunk payloads (JSON, without "data: ") for one message.
  std::vector<std::string> Chunks(int prompt_index, const kvserve::v1::GenerateResponse& response);
  // The final usage chunk (choices empty), summed over every message seen.
  std::string UsageChunk() const;

 private:
  struct Choice {
    std::string text;         // non-streaming: the text so far
    nlohmann::json logprobs;  // accumulated, in the endpoint's format; null when not asked
    nlohmann::json finish_reason;
    nlohmann::json stop_reason;
    bool role_sent = false;
    int64_t text_offset = 0;  // completions logprobs: bytes of the tokens so far
    // Streaming with tool-call parsing: the text and calls read so far, and bytes of the text
    // sent as content.
    std::optional<ToolCallStreamParser> tool_parser;
    size_t content_sent = 0;
  };

  // What one prompt's stream sent of the prompt (GenerateResponse.prompt_logprobs), for echo and
  // prompt_logprobs.
  struct Prompt {
    std::string text;                // echo: the prompt's text
    nlohmann::json logprobs;         // echo with logprobs: completions format; else null
    nlohmann::json prompt_logprobs;  // vLLM's format; null when not asked
  };

  bool chat() const { return request_.endpoint == OpenAiEndpoint::kChatCompletions; }
  void AddPrompt(int prompt_index, const kvserve::v1::GenerateResponse& response);
  // Choice `index`'s text and completions logprobs with echo: the prompt's, then its own.
  std::string EchoedText(size_t index) const;
  nlohmann::json EchoedLogprobs(size_t index) const;
  Choice& ChoiceAt(int index);
  // Appends the logprobs of `delta` to `*logprobs` (endpoint format), creating it if null.
  void AppendLogprobs(const kvserve::v1::ChoiceDelta& delta, Choice* choice,
                      nlohmann::json* logprobs);
  void AddUsage(const kvserve::v1::GenerateResponse& response);
  nlohmann::json UsageJson() const;
  nlohmann::json Envelope(bool chunk) const;
  // The id of call `call_index` of choice `index`, from the response id.
  std::string ToolCallId(int index, int call_index) const;
  // The calls of choice `index` parsed from its text, OpenAI-shaped, at most one unless
  // parallel_tool_calls.
  std::vector<nlohmann::json> ToolCalls(int index, const ParsedToolCalls& parsed) const;
  // Streaming chat with tool-call parsing: the chunks for one delta of choice `index`.
  std::vector<std::string> ToolAwareChunks(int index, const kvserve::v1::ChoiceDelta& delta,
                                           nlohmann::json logprobs);

  const OpenAiRequest& request_;
  const std::string id_;
  const std::string model_;
  const int64_t created_;
  std::vector<Choice> choices_;
  std::vector<Prompt> prompts_;  // one per request
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  int64_t cached_tokens_ = 0;
};

// JSON text of `value`; invalid UTF-8 is replaced, never thrown on.
std::string DumpJson(const nlohmann::json& value);

}  // namespace kvserve

#endif  // KVSERVE_HTTP_OPENAI_RESPONSE_H_
