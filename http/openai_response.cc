#include "http/openai_response.h"

#include <cmath>

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

Json StopReason(const v1::ChoiceDelta& delta) {
  if (delta.has_stop_string()) return delta.stop_string();
  if (delta.has_stop_token_id()) return delta.stop_token_id();
  return Json();
}

}  // namespace

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

OpenAiResponseBuilder::OpenAiResponseBuilder(const OpenAiRequest& request, std::string id,
                                             std::string model, int64_t created_unix_s)
    : request_(request), id_(std::move(id)), model_(std::move(model)), created_(created_unix_s) {
  choices_.resize(request_.requests.size() * static_cast<size_t>(request_.n));
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
  completion_tokens_ += response.usage().completion_tokens();
  cached_tokens_ += response.usage().cached_prompt_tokens();
}

void OpenAiResponseBuilder::Add(int prompt_index, const v1::GenerateResponse& response) {
  for (const v1::ChoiceDelta& delta : response.choices()) {
    Choice& choice = ChoiceAt(prompt_index * request_.n + delta.index());
    choice.text += delta.text();
    AppendLogprobs(delta, &choice, &choice.logprobs);
    if (delta.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      choice.finish_reason = FinishReason(delta);
      choice.stop_reason = StopReason(delta);
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
  return body;
}

std::string OpenAiResponseBuilder::Body() const {
  Json body = Envelope(/*chunk=*/false);
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& choice = choices_[i];
    Json out;
    out["index"] = i;
    if (chat()) {
      out["message"] = {{"role", "assistant"}, {"content", choice.text}};
    } else {
      out["text"] = choice.text;
    }
    out["logprobs"] = choice.logprobs;
    out["finish_reason"] = choice.finish_reason;
    out["stop_reason"] = choice.stop_reason;
    choices.push_back(std::move(out));
  }
  body["choices"] = std::move(choices);
  body["usage"] = UsageJson();
  return DumpJson(body);
}

std::vector<std::string> OpenAiResponseBuilder::Chunks(int prompt_index,
                                                       const v1::GenerateResponse& response) {
  std::vector<std::string> chunks;
  for (const v1::ChoiceDelta& delta : response.choices()) {
    const int index = prompt_index * request_.n + delta.index();
    Choice& choice = ChoiceAt(index);
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
      out["stop_reason"] = StopReason(delta);
    }
    Json chunk = Envelope(/*chunk=*/true);
    chunk["choices"] = Json::array({std::move(out)});
    if (request_.include_usage) chunk["usage"] = Json();
    chunks.push_back(DumpJson(chunk));
  }
  AddUsage(response);
  return chunks;
}

std::string OpenAiResponseBuilder::UsageChunk() const {
  Json chunk = Envelope(/*chunk=*/true);
  chunk["choices"] = Json::array();
  chunk["usage"] = UsageJson();
  return DumpJson(chunk);
}

}  // namespace kvserve
