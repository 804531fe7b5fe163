#include "http/openai_response.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "api/request_validation.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using Json = nlohmann::json;

constexpr double kMinLogprob = -9999.0;  // what -inf (and anything below) is written as

double LogprobValue(float logprob) {
  return std::isfinite(logprob) && logprob > kMinLogprob ? logprob : kMinLogprob;
}

// A token's text for JSON: its bytes when they are valid UTF-8, "bytes:\xNN.." otherwise.
std::string TokenText(const std::string& bytes) {
  if (IsValidUtf8(bytes)) return bytes;
  std::string text = "bytes:";
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : bytes) {
    text += "\\x";
    text += kHex[c >> 4];
    text += kHex[c & 15];
  }
  return text;
}

Json ByteList(const std::string& bytes) {
  Json list = Json::array();
  for (unsigned char c : bytes) list.push_back(static_cast<int>(c));
  return list;
}

Json FinishReason(const v1::ChoiceDelta& delta) {
  switch (delta.finish_reason()) {
    case v1::FINISH_REASON_STOP:
    case v1::FINISH_REASON_STOP_STRING:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_ABORT:
      return "abort";
    default:
      return Json();
  }
}

// vLLM's stop_reason: the stop string or the request's stop_token_ids entry that matched; null
// for the model's EOS (which the proto names too) and every other finish.
Json StopReason(const v1::ChoiceDelta& delta, const OpenAiRequest& request) {
  if (delta.has_stop_string()) return delta.stop_string();
  if (delta.has_stop_token_id() && !request.requests.empty()) {
    for (int32_t id : request.requests[0].sampling().stop_token_ids()) {
      if (id == delta.stop_token_id()) return id;
    }
  }
  return Json();
}

// The parser of a chat output's calls: constrained to tool_choice "required"'s list or to the
// named function's arguments, else in the model's format.
ToolCallStreamParser ToolCallParserFor(const OpenAiRequest& request) {
  if (request.tool_calls_required) return ToolCallStreamParser::CallList();
  if (!request.forced_tool.empty()) return ToolCallStreamParser::Arguments(request.forced_tool);
  return ToolCallStreamParser(request.tool_call_format);
}

}  // namespace

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

OpenAiResponseBuilder::OpenAiResponseBuilder(const OpenAiRequest& request, std::string id,
                                             std::string model, int64_t created_unix_s)
    : request_(request), id_(std::move(id)), model_(std::move(model)), created_(created_unix_s) {
  choices_.resize(request_.requests.size() * static_cast<size_t>(request_.n));
  prompts_.resize(request_.requests.size());
}

void OpenAiResponseBuilder::AddPrompt(int prompt_index, const v1::GenerateResponse& response) {
  if (response.prompt_logprobs_size() == 0 || prompt_index >= static_cast<int>(prompts_.size())) {
    return;
  }
  Prompt& prompt = prompts_[prompt_index];
  const v1::GenerateRequest& request = request_.requests[prompt_index];
  const bool text_from_tokens = !request.has_prompt();
  if (request_.echo && request_.logprobs) {
    prompt.logprobs = {{"tokens", Json::array()},
                       {"token_logprobs", Json::array()},
                       {"top_logprobs", Json::array()},
                       {"text_offset", Json::array()}};
  }
  if (request_.prompt_logprobs >= 0) prompt.prompt_logprobs = Json::array();
  int64_t offset = 0;
  for (int i = 0; i < response.prompt_logprobs_size(); ++i) {
    const v1::PositionLogprobs& position = response.prompt_logprobs(i);
    const std::string& bytes = position.chosen().token_bytes();
    const bool scored = i > 0;  // the first token has nothing before it
    if (text_from_tokens) prompt.text += bytes;
    if (!prompt.logprobs.is_null()) {
      prompt.logprobs["tokens"].push_back(TokenText(bytes));
      prompt.logprobs["token_logprobs"].push_back(
          scored ? Json(LogprobValue(position.chosen().logprob())) : Json());
      Json top = Json::object();
      for (int k = 0; k < position.top_size() && k < request_.top_logprobs; ++k) {
        top[TokenText(position.top(k).token_bytes())] = LogprobValue(position.top(k).logprob());
      }
      prompt.logprobs["top_logprobs"].push_back(scored && request_.top_logprobs > 0 ? top : Json());
      prompt.logprobs["text_offset"].push_back(offset);
    }
    offset += static_cast<int64_t>(bytes.size());
    if (!prompt.prompt_logprobs.is_null()) {
      if (!scored) {
        prompt.prompt_logprobs.push_back(Json());
        continue;
      }
      Json entry = Json::object();
      auto add = [&entry](const v1::TokenLogprob& token) {
        entry[std::to_string(token.token_id())] = {
            {"logprob", LogprobValue(token.logprob())},
            {"rank", token.rank()},
            {"decoded_token", TokenText(token.token_bytes())}};
      };
      add(position.chosen());
      for (int k = 0; k < position.top_size() && k < request_.prompt_logprobs; ++k) {
        add(position.top(k));
      }
      prompt.prompt_logprobs.push_back(std::move(entry));
    }
  }
  if (!text_from_tokens) prompt.text = request.prompt();
}

std::string OpenAiResponseBuilder::EchoedText(size_t index) const {
  const Prompt& prompt = prompts_[index / request_.n];
  return request_.prompt_only ? prompt.text : prompt.text + choices_[index].text;
}

Json OpenAiResponseBuilder::EchoedLogprobs(size_t index) const {
  const Prompt& prompt = prompts_[index / request_.n];
  const Json& own = choices_[index].logprobs;
  if (prompt.logprobs.is_null()) return own;  // nothing came for the prompt
  Json merged = prompt.logprobs;
  if (request_.prompt_only || own.is_null()) return merged;
  const int64_t prompt_bytes = static_cast<int64_t>(prompt.text.size());
  for (const char* list : {"tokens", "token_logprobs", "top_logprobs"}) {
    for (const Json& item : own[list]) merged[list].push_back(item);
  }
  for (const Json& offset : own["text_offset"]) {
    merged["text_offset"].push_back(prompt_bytes + offset.get<int64_t>());
  }
  return merged;
}

OpenAiResponseBuilder::Choice& OpenAiResponseBuilder::ChoiceAt(int index) {
  if (index >= static_cast<int>(choices_.size())) choices_.resize(index + 1);
  return choices_[index];
}

void OpenAiResponseBuilder::AppendLogprobs(const v1::ChoiceDelta& delta, Choice* choice,
                                           Json* logprobs) {
  if (!request_.logprobs) return;
  if (chat()) {
    if (logprobs->is_null()) (*logprobs)["content"] = Json::array();
    Json& content = (*logprobs)["content"];
    for (const v1::PositionLogprobs& position : delta.logprobs()) {
      Json entry;
      entry["token"] = TokenText(position.chosen().token_bytes());
      entry["logprob"] = LogprobValue(position.chosen().logprob());
      entry["bytes"] = ByteList(position.chosen().token_bytes());
      Json top = Json::array();
      for (const v1::TokenLogprob& alternative : position.top()) {
        top.push_back({{"token", TokenText(alternative.token_bytes())},
                       {"logprob", LogprobValue(alternative.logprob())},
                       {"bytes", ByteList(alternative.token_bytes())}});
      }
      entry["top_logprobs"] = std::move(top);
      content.push_back(std::move(entry));
    }
    return;
  }
  if (logprobs->is_null()) {
    *logprobs = {{"tokens", Json::array()},
                 {"token_logprobs", Json::array()},
                 {"top_logprobs", Json::array()},
                 {"text_offset", Json::array()}};
  }
  for (const v1::PositionLogprobs& position : delta.logprobs()) {
    (*logprobs)["tokens"].push_back(TokenText(position.chosen().token_bytes()));
    (*logprobs)["token_logprobs"].push_back(LogprobValue(position.chosen().logprob()));
    Json top = Json::object();
    for (const v1::TokenLogprob& alternative : position.top()) {
      top[TokenText(alternative.token_bytes())] = LogprobValue(alternative.logprob());
    }
    (*logprobs)["top_logprobs"].push_back(request_.top_logprobs > 0 ? top : Json());
    (*logprobs)["text_offset"].push_back(choice->text_offset);
    choice->text_offset += static_cast<int64_t>(position.chosen().token_bytes().size());
  }
}

void OpenAiResponseBuilder::AddUsage(const v1::GenerateResponse& response) {
  if (!response.has_usage()) return;
  prompt_tokens_ += response.usage().prompt_tokens();
  if (!request_.prompt_only) completion_tokens_ += response.usage().completion_tokens();
  cached_tokens_ += response.usage().cached_prompt_tokens();
}

void OpenAiResponseBuilder::Add(int prompt_index, const v1::GenerateResponse& response) {
  AddPrompt(prompt_index, response);
  for (const v1::ChoiceDelta& delta : response.choices()) {
    Choice& choice = ChoiceAt(prompt_index * request_.n + delta.index());
    choice.text += delta.text();
    AppendLogprobs(delta, &choice, &choice.logprobs);
    if (delta.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      choice.finish_reason = FinishReason(delta);
      choice.stop_reason = StopReason(delta, request_);
    }
  }
  AddUsage(response);
}

Json OpenAiResponseBuilder::UsageJson() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
}

Json OpenAiResponseBuilder::Envelope(bool chunk) const {
  Json body;
  body["id"] = id_;
  body["object"] =
      chat() ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  body["created"] = created_;
  body["model"] = model_;
  body["system_fingerprint"] = request_.system_fingerprint;
  return body;
}

std::string OpenAiResponseBuilder::ToolCallId(int index, int call_index) const {
  const uint64_t seed = std::hash<std::string>()(id_) ^ (static_cast<uint64_t>(index) << 32);
  return MakeToolCallId(request_.tool_call_format, seed, call_index);
}

std::vector<Json> OpenAiResponseBuilder::ToolCalls(int index, const ParsedToolCalls& parsed) const {
  std::vector<Json> calls;
  for (size_t k = 0; k < parsed.calls.size(); ++k) {
    if (k > 0 && !request_.parallel_tool_calls) break;
    const ChatToolCall& call = parsed.calls[k];
    calls.push_back({{"id", ToolCallId(index, static_cast<int>(k))},
                     {"type", "function"},
                     {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return calls;
}

std::string OpenAiResponseBuilder::Body() const {
  Json body = Envelope(/*chunk=*/false);
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& choice = choices_[i];
    Json out;
    out["index"] = i;
    Json finish_reason = request_.prompt_only ? Json("length") : choice.finish_reason;
    if (chat()) {
      out["message"] = {{"role", "assistant"}, {"content", choice.text}};
      if (request_.parse_tool_calls) {
        const ParsedToolCalls parsed = ToolCallParserFor(request_).Parse(choice.text);
        if (!parsed.calls.empty()) {
          out["message"]["content"] = parsed.content.empty() ? Json() : Json(parsed.content);
          out["message"]["tool_calls"] = ToolCalls(static_cast<int>(i), parsed);
          if (finish_reason == "stop") finish_reason = "tool_calls";
        }
      }
      out["logprobs"] = choice.logprobs;
    } else {
      out["text"] = request_.echo ? EchoedText(i) : choice.text;
      out["logprobs"] = request_.echo ? EchoedLogprobs(i) : choice.logprobs;
      if (request_.prompt_logprobs >= 0) {
        out["prompt_logprobs"] = prompts_[i / request_.n].prompt_logprobs;
      }
    }
    out["finish_reason"] = finish_reason;
    out["stop_reason"] = request_.prompt_only ? Json() : choice.stop_reason;
    choices.push_back(std::move(out));
  }
  body["choices"] = std::move(choices);
  if (chat() && request_.prompt_logprobs >= 0 && !prompts_.empty()) {
    body["prompt_logprobs"] = prompts_[0].prompt_logprobs;
  }
  body["usage"] = UsageJson();
  return DumpJson(body);
}

std::vector<std::string> OpenAiResponseBuilder::Chunks(int prompt_index,
                                                       const v1::GenerateResponse& response) {
  std::vector<std::string> chunks;
  for (const v1::ChoiceDelta& delta : response.choices()) {
    const int index = prompt_index * request_.n + delta.index();
    Choice& choice = ChoiceAt(index);
    if (chat() && request_.parse_tool_calls) {
      Json logprobs;
      AppendLogprobs(delta, &choice, &logprobs);
      for (std::string& chunk : ToolAwareChunks(index, delta, std::move(logprobs))) {
        chunks.push_back(std::move(chunk));
      }
      continue;
    }
    Json out;
    out["index"] = index;
    if (chat()) {
      Json message = Json::object();
      if (!choice.role_sent) {
        message["role"] = "assistant";
        choice.role_sent = true;
      }
      message["content"] = delta.text();
      out["delta"] = std::move(message);
    } else {
      out["text"] = delta.text();
    }
    Json logprobs;
    AppendLogprobs(delta, &choice, &logprobs);
    out["logprobs"] = std::move(logprobs);
    out["finish_reason"] = FinishReason(delta);
    if (delta.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      out["stop_reason"] = StopReason(delta, request_);
    }
    Json chunk = Envelope(/*chunk=*/true);
    chunk["choices"] = Json::array({std::move(out)});
    if (request_.include_usage) chunk["usage"] = Json();
    chunks.push_back(DumpJson(chunk));
  }
  AddUsage(response);
  return chunks;
}

std::vector<std::string> OpenAiResponseBuilder::ToolAwareChunks(int index,
                                                                const v1::ChoiceDelta& delta,
                                                                Json logprobs) {
  Choice& choice = ChoiceAt(index);
  if (!choice.tool_parser) choice.tool_parser = ToolCallParserFor(request_);
  ToolCallStreamParser& parser = *choice.tool_parser;
  std::vector<ToolCallDelta> calls = parser.Append(delta.text());
  const bool finished = delta.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  if (finished) {
    for (ToolCallDelta& call : parser.Finish()) calls.push_back(std::move(call));
  }
  const bool has_calls = finished && !parser.content_only();
  std::string content;
  if (const size_t content_end = parser.content_end(); content_end > choice.content_sent) {
    content = parser.text().substr(choice.content_sent, content_end - choice.content_sent);
    choice.content_sent = content_end;
  }
  if (has_calls) {
    // Text after the calls (Hermes) is content too: what Result() has past what was sent (which
    // is its start, but for the white space it trims).
    const absl::string_view sent = absl::StripLeadingAsciiWhitespace(
        absl::string_view(parser.text().data(), choice.content_sent));
    const std::string all = parser.Result().content;
    if (all.size() > sent.size()) content += all.substr(sent.size());
  }
  Json finish_reason = FinishReason(delta);
  if (has_calls && finish_reason == "stop") finish_reason = "tool_calls";

  // The deltas of this message, in order; the finish reason goes with the last.
  std::vector<Json> messages;
  if (!content.empty() || (finished && !has_calls)) messages.push_back({{"content", content}});
  for (const ToolCallDelta& call : calls) {
    if (call.index > 0 && !request_.parallel_tool_calls) continue;
    if (!call.name.empty()) {
      messages.push_back(
          {{"tool_calls",
            Json::array({{{"index", call.index},
                          {"id", ToolCallId(index, call.index)},
                          {"type", "function"},
                          {"function", {{"name", call.name}, {"arguments", ""}}}}})}});
    }
    if (!call.arguments.empty()) {
      messages.push_back(
          {{"tool_calls", Json::array({{{"index", call.index},
                                        {"function", {{"arguments", call.arguments}}}}})}});
    }
  }
  if (has_calls) messages.push_back(Json::object());
  if (messages.empty()) messages.push_back({{"content", ""}});  // a chunk for each message

  std::vector<std::string> chunks;
  for (size_t k = 0; k < messages.size(); ++k) {
    Json& message = messages[k];
    if (!choice.role_sent) {
      message["role"] = "assistant";
      choice.role_sent = true;
    }
    Json out;
    out["index"] = index;
    out["delta"] = std::move(message);
    out["logprobs"] = k == 0 ? std::move(logprobs) : Json();  // with the first chunk only
    const Json reason = k + 1 == messages.size() ? finish_reason : Json();
    out["finish_reason"] = reason;
    if (!reason.is_null()) out["stop_reason"] = StopReason(delta, request_);
    Json chunk = Envelope(/*chunk=*/true);
    chunk["choices"] = Json::array({std::move(out)});
    if (request_.include_usage) chunk["usage"] = Json();
    chunks.push_back(DumpJson(chunk));
  }
  return chunks;
}

std::string OpenAiResponseBuilder::UsageChunk() const {
  Json chunk = Envelope(/*chunk=*/true);
  chunk["choices"] = Json::array();
  chunk["usage"] = UsageJson();
  return DumpJson(chunk);
}

}  // namespace kvserve
