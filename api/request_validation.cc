#include "api/request_validation.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kvcache/kv_budget.h"
#include "nlohmann/json.hpp"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

absl::Status Invalid(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

std::string Field(absl::string_view path, absl::string_view field) {
  return path.empty() ? std::string(field) : absl::StrCat(path, ".", field);
}

absl::Status CheckUtf8(absl::string_view path, absl::string_view text) {
  if (IsValidUtf8(text)) return absl::OkStatus();
  return Invalid(path, "must be valid UTF-8");
}

absl::Status CheckRequestId(absl::string_view request_id) {
  if (request_id.size() > 128) {
    return Invalid("request_id", absl::StrCat("at most 128 characters, got ", request_id.size()));
  }
  for (char c : request_id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return Invalid("request_id", "only characters from [A-Za-z0-9._:-] are allowed");
  }
  return absl::OkStatus();
}

absl::Status CheckModel(absl::string_view model, const ServingLimits& limits) {
  return ValidateModelName(model, limits);
}

// Functions one chat may offer the model (OpenAI's own limit).
constexpr int kMaxChatTools = 128;

// A function name as OpenAI allows it: 1 to 64 characters of [A-Za-z0-9_-].
absl::Status CheckFunctionName(absl::string_view path, absl::string_view name) {
  if (name.empty() || name.size() > 64) {
    return Invalid(path, absl::StrCat("must be 1 to 64 characters, got ", name.size()));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') {
      return Invalid(path, "only characters from [A-Za-z0-9_-] are allowed");
    }
  }
  return absl::OkStatus();
}

// The JSON text of an object.
absl::Status CheckJsonObject(absl::string_view path, absl::string_view text) {
  const nlohmann::json parsed = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                                      /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return Invalid(path, "must be JSON text (it does not parse)");
  if (!parsed.is_object()) return Invalid(path, "must be the JSON text of an object");
  return absl::OkStatus();
}

absl::Status CheckChat(const v1::ChatConversation& chat, const ServingLimits& limits) {
  if (!limits.chat_supported) {
    return Invalid("chat", "the served model has no chat template; send prompt or token ids");
  }
  if (chat.messages_size() == 0) return Invalid("chat.messages", "at least one message is needed");
  if (chat.messages_size() > limits.max_chat_messages) {
    return Invalid("chat.messages", absl::StrCat("at most ", limits.max_chat_messages,
                                                 " messages, got ", chat.messages_size()));
  }
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& message = chat.messages(i);
    const std::string path = absl::StrCat("chat.messages[", i, "]");
    const std::string& role = message.role();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return Invalid(Field(path, "role"),
                     absl::StrCat("must be system, user, assistant or tool, got '",
                                  IsValidUtf8(role) ? role : "<invalid UTF-8>", "'"));
    }
    KVSERVE_RETURN_IF_ERROR(CheckUtf8(Field(path, "content"), message.content()));
    if (message.tool_calls_size() > 0 && role != "assistant") {
      return Invalid(Field(path, "tool_calls"), "only assistant messages make tool calls");
    }
    for (int k = 0; k < message.tool_calls_size(); ++k) {
      const v1::ChatToolCall& call = message.tool_calls(k);
      const std::string call_path = absl::StrCat(path, ".tool_calls[", k, "]");
      KVSERVE_RETURN_IF_ERROR(CheckUtf8(Field(call_path, "id"), call.id()));
      KVSERVE_RETURN_IF_ERROR(CheckFunctionName(Field(call_path, "name"), call.name()));
      if (!call.arguments().empty()) {
        KVSERVE_RETURN_IF_ERROR(CheckJsonObject(Field(call_path, "arguments"), call.arguments()));
      }
    }
    KVSERVE_RETURN_IF_ERROR(CheckUtf8(Field(path, "tool_call_id"), message.tool_call_id()));
    KVSERVE_RETURN_IF_ERROR(CheckUtf8(Field(path, "name"), message.name()));
  }
  if (chat.tools_size() > kMaxChatTools) {
    return Invalid("chat.tools",
                   absl::StrCat("at most ", kMaxChatTools, " tools, got ", chat.tools_size()));
  }
  absl::flat_hash_set<std::string> names;
  for (int i = 0; i < chat.tools_size(); ++i) {
    const v1::ChatTool& tool = chat.tools(i);
    const std::string path = absl::StrCat("chat.tools[", i, "]");
    KVSERVE_RETURN_IF_ERROR(CheckFunctionName(Field(path, "name"), tool.name()));
    if (!names.insert(tool.name()).second) {
      return Invalid(Field(path, "name"), absl::StrCat("'", tool.name(), "' is given twice"));
    }
    KVSERVE_RETURN_IF_ERROR(CheckUtf8(Field(path, "description"), tool.description()));
    if (!tool.parameters().empty()) {
      KVSERVE_RETURN_IF_ERROR(CheckJsonObject(Field(path, "parameters"), tool.parameters()));
    }
  }
  return absl::OkStatus();
}

bool IsFinite(float value) { return std::isfinite(value); }

}  // namespace

absl::Status ValidateModelName(absl::string_view model, const ServingLimits& limits) {
  if (model.empty() || model == limits.model_name) return absl::OkStatus();
  for (const std::string& alias : limits.model_aliases) {
    if (model == alias) return absl::OkStatus();
  }
  if (!IsValidUtf8(model)) return Invalid("model", "must be valid UTF-8");
  return absl::NotFoundError(
      absl::StrCat("model: '", model, "' is not served here (serving '", limits.model_name, "')"));
}

absl::Status CheckCountRange(absl::string_view path, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return Invalid(path, absl::StrCat("must be in [", min, ", ", max, "], got ", value));
}

ServingLimits ServingLimitsFromModelInfo(const v1::ModelInfo& info, int64_t kv_total_blocks) {
  const v1::GenerationLimits& proto = info.limits();
  ServingLimits limits;
  limits.model_name = info.name();
  limits.model_aliases.assign(info.aliases().begin(), info.aliases().end());
  limits.vocab_size = info.vocab_size();
  limits.model_context_length = info.context_length();
  limits.context_length = info.pool_limited_context_length() > 0
                              ? info.pool_limited_context_length()
                              : info.context_length();
  limits.max_prompt_tokens = proto.max_prompt_tokens();
  limits.max_tokens = proto.max_tokens();
  limits.default_max_tokens = proto.default_max_tokens();
  limits.max_n = proto.max_n();
  limits.max_logprobs = proto.max_logprobs();
  limits.max_stop_strings = proto.max_stop_strings();
  limits.max_stop_string_bytes = proto.max_stop_string_bytes();
  limits.max_stop_token_ids = proto.max_stop_token_ids();
  limits.max_chat_messages = proto.max_chat_messages();
  limits.chat_supported = !info.chat_template_format().empty();
  limits.kv_block_size = info.kv_block_size();
  limits.kv_total_blocks = kv_total_blocks;
  return limits;
}

v1::GenerationLimits ToProtoLimits(const ServingLimits& limits) {
  v1::GenerationLimits proto;
  proto.set_max_prompt_tokens(limits.max_prompt_tokens);
  proto.set_max_tokens(limits.max_tokens);
  proto.set_default_max_tokens(limits.default_max_tokens);
  proto.set_max_n(limits.max_n);
  proto.set_max_logprobs(limits.max_logprobs);
  proto.set_max_stop_strings(limits.max_stop_strings);
  proto.set_max_stop_string_bytes(limits.max_stop_string_bytes);
  proto.set_max_stop_token_ids(limits.max_stop_token_ids);
  proto.set_max_chat_messages(limits.max_chat_messages);
  return proto;
}

namespace {

// Texts of a structured-output constraint (a schema, a regex, a grammar, a choice) at most.
constexpr size_t kMaxConstraintBytes = 64 * 1024;
constexpr int kMaxChoices = 256;

absl::Status CheckConstraintText(const std::string& path, const std::string& text) {
  if (text.empty()) return Invalid(path, "must not be empty");
  if (text.size() > kMaxConstraintBytes) {
    return Invalid(path,
                   absl::StrCat("at most ", kMaxConstraintBytes, " bytes, got ", text.size()));
  }
  return CheckUtf8(path, text);
}

// The form of a structured_output; whether the schema, regex or grammar compiles is the
// worker's to say (grammar/).
absl::Status CheckStructuredOutput(const v1::SamplingParams& sampling, const std::string& path) {
  const v1::StructuredOutput& output = sampling.structured_output();
  switch (output.kind_case()) {
    case v1::StructuredOutput::KIND_NOT_SET:
      return Invalid(path, "one of json_object, json_schema, regex, choice, grammar is required");
    case v1::StructuredOutput::kJsonObject:
      if (!output.json_object()) return Invalid(Field(path, "json_object"), "must be true");
      break;
    case v1::StructuredOutput::kJsonSchema:
      KVSERVE_RETURN_IF_ERROR(
          CheckConstraintText(Field(path, "json_schema"), output.json_schema()));
      KVSERVE_RETURN_IF_ERROR(CheckJsonObject(Field(path, "json_schema"), output.json_schema()));
      break;
    case v1::StructuredOutput::kRegex:
      KVSERVE_RETURN_IF_ERROR(CheckConstraintText(Field(path, "regex"), output.regex()));
      break;
    case v1::StructuredOutput::kGrammar:
      KVSERVE_RETURN_IF_ERROR(CheckConstraintText(Field(path, "grammar"), output.grammar()));
      break;
    case v1::StructuredOutput::kChoice: {
      const auto& choices = output.choice().choices();
      if (choices.empty() || choices.size() > kMaxChoices) {
        return Invalid(Field(path, "choice.choices"),
                       absl::StrCat("1 to ", kMaxChoices, " choices, got ", choices.size()));
      }
      for (int i = 0; i < choices.size(); ++i) {
        KVSERVE_RETURN_IF_ERROR(CheckConstraintText(
            absl::StrCat(Field(path, "choice.choices"), "[", i, "]"), choices[i]));
      }
      break;
    }
  }
  if (sampling.ignore_eos()) {
    return Invalid(path,
                   "cannot be combined with ignore_eos (the end of the output is the "
                   "constraint's)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSamplingParams(const v1::SamplingParams& sampling, const ServingLimits& limits,
                                    absl::string_view path) {
  if (sampling.has_temperature() &&
      (!IsFinite(sampling.temperature()) || sampling.temperature() < 0)) {
    return Invalid(Field(path, "temperature"),
                   absl::StrCat("must be finite and >= 0, got ", sampling.temperature()));
  }
  if (sampling.top_k() < 0) {
    return Invalid(Field(path, "top_k"), absl::StrCat("must be >= 0, got ", sampling.top_k()));
  }
  if (sampling.has_top_p() &&
      !(IsFinite(sampling.top_p()) && sampling.top_p() > 0 && sampling.top_p() <= 1)) {
    return Invalid(Field(path, "top_p"), absl::StrCat("must be in (0, 1], got ", sampling.top_p()));
  }
  if (!(sampling.min_p() >= 0 && sampling.min_p() <= 1)) {
    return Invalid(Field(path, "min_p"), absl::StrCat("must be in [0, 1], got ", sampling.min_p()));
  }
  if (sampling.has_repetition_penalty() &&
      !(IsFinite(sampling.repetition_penalty()) && sampling.repetition_penalty() > 0)) {
    return Invalid(Field(path, "repetition_penalty"),
                   absl::StrCat("must be finite and > 0, got ", sampling.repetition_penalty()));
  }
  if (!(sampling.presence_penalty() >= -2 && sampling.presence_penalty() <= 2)) {
    return Invalid(Field(path, "presence_penalty"),
                   absl::StrCat("must be in [-2, 2], got ", sampling.presence_penalty()));
  }
  if (!(sampling.frequency_penalty() >= -2 && sampling.frequency_penalty() <= 2)) {
    return Invalid(Field(path, "frequency_penalty"),
                   absl::StrCat("must be in [-2, 2], got ", sampling.frequency_penalty()));
  }
  KVSERVE_RETURN_IF_ERROR(
      CheckCountRange(Field(path, "max_tokens"), sampling.max_tokens(), 0, limits.max_tokens));
  if (sampling.stop_size() > limits.max_stop_strings) {
    return Invalid(Field(path, "stop"), absl::StrCat("at most ", limits.max_stop_strings,
                                                     " stop strings, got ", sampling.stop_size()));
  }
  for (int i = 0; i < sampling.stop_size(); ++i) {
    const std::string field = absl::StrCat(Field(path, "stop"), "[", i, "]");
    const std::string& stop = sampling.stop(i);
    if (stop.empty()) return Invalid(field, "must not be empty");
    if (static_cast<int64_t>(stop.size()) > limits.max_stop_string_bytes) {
      return Invalid(field, absl::StrCat("at most ", limits.max_stop_string_bytes, " bytes, got ",
                                         stop.size()));
    }
    KVSERVE_RETURN_IF_ERROR(CheckUtf8(field, stop));
  }
  if (sampling.stop_token_ids_size() > limits.max_stop_token_ids) {
    return Invalid(Field(path, "stop_token_ids"),
                   absl::StrCat("at most ", limits.max_stop_token_ids, " ids, got ",
                                sampling.stop_token_ids_size()));
  }
  for (int i = 0; i < sampling.stop_token_ids_size(); ++i) {
    const int32_t id = sampling.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat(Field(path, "stop_token_ids"), "[", i, "]"),
                     absl::StrCat("token id ", id, " is outside [0, ", limits.vocab_size, ")"));
    }
  }
  if (sampling.has_logprobs() &&
      (sampling.logprobs() < 0 || sampling.logprobs() > limits.max_logprobs)) {
    return Invalid(Field(path, "logprobs"), absl::StrCat("must be in [0, ", limits.max_logprobs,
                                                         "], got ", sampling.logprobs()));
  }
  if (sampling.has_prompt_logprobs() &&
      (sampling.prompt_logprobs() < 0 || sampling.prompt_logprobs() > limits.max_logprobs)) {
    return Invalid(Field(path, "prompt_logprobs"),
                   absl::StrCat("must be in [0, ", limits.max_logprobs, "], got ",
                                sampling.prompt_logprobs()));
  }
  KVSERVE_RETURN_IF_ERROR(CheckCountRange(Field(path, "n"), sampling.n(), 0, limits.max_n));
  if (sampling.has_structured_output()) {
    KVSERVE_RETURN_IF_ERROR(CheckStructuredOutput(sampling, Field(path, "structured_output")));
  }
  return absl::OkStatus();
}

absl::Status ValidateGenerateRequest(const v1::GenerateRequest& request,
                                     const ServingLimits& limits) {
  KVSERVE_RETURN_IF_ERROR(CheckModel(request.model(), limits));
  KVSERVE_RETURN_IF_ERROR(CheckRequestId(request.request_id()));
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      if (request.prompt().empty()) return Invalid("prompt", "must not be empty");
      KVSERVE_RETURN_IF_ERROR(CheckUtf8("prompt", request.prompt()));
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      if (request.prompt_token_ids().ids_size() == 0) {
        return Invalid("prompt_token_ids.ids", "must not be empty");
      }
      break;
    case v1::GenerateRequest::kChat:
      KVSERVE_RETURN_IF_ERROR(CheckChat(request.chat(), limits));
      break;
    case v1::GenerateRequest::INPUT_NOT_SET:
      return Invalid("input", "exactly one of prompt, prompt_token_ids, chat is required");
  }
  if (request.priority() < -100 || request.priority() > 100) {
    return Invalid("priority", absl::StrCat("must be in [-100, 100], got ", request.priority()));
  }
  return ValidateSamplingParams(request.sampling(), limits, "sampling");
}

absl::Status ValidateTokenizeRequest(const v1::TokenizeRequest& request,
                                     const ServingLimits& limits) {
  KVSERVE_RETURN_IF_ERROR(CheckModel(request.model(), limits));
  switch (request.input_case()) {
    case v1::TokenizeRequest::kPrompt:
      return CheckUtf8("prompt", request.prompt());
    case v1::TokenizeRequest::kChat:
      return CheckChat(request.chat(), limits);
    case v1::TokenizeRequest::INPUT_NOT_SET:
      break;
  }
  return Invalid("input", "exactly one of prompt, chat is required");
}

absl::Status ValidateDetokenizeRequest(const v1::DetokenizeRequest& request,
                                       const ServingLimits& limits) {
  KVSERVE_RETURN_IF_ERROR(CheckModel(request.model(), limits));
  for (int i = 0; i < request.token_ids_size(); ++i) {
    const int32_t id = request.token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrCat("token_ids[", i, "]"),
                     absl::StrCat("token id ", id, " is outside [0, ", limits.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePromptTokens(absl::Span<const int32_t> token_ids, const ServingLimits& limits,
                                  absl::string_view path) {
  if (token_ids.empty()) return Invalid("input", "the prompt has no tokens");
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (token_ids[i] < 0 || token_ids[i] >= limits.vocab_size) {
      return Invalid(
          absl::StrCat(path, "[", i, "]"),
          absl::StrCat("token id ", token_ids[i], " is outside [0, ", limits.vocab_size, ")"));
    }
  }
  if (static_cast<int64_t>(token_ids.size()) > limits.max_prompt_tokens) {
    return Invalid("input", absl::StrCat("the prompt has ", token_ids.size(), " tokens, more than ",
                                         "limits.max_prompt_tokens = ", limits.max_prompt_tokens));
  }
  return absl::OkStatus();
}

absl::Status ValidateKvFit(int32_t num_prompt_tokens, int32_t max_tokens, int32_t n,
                           const ServingLimits& limits) {
  const int32_t requested = max_tokens > 0 ? max_tokens : limits.default_max_tokens;
  const KvBudget budget =
      KvBudgetFor(num_prompt_tokens, requested, n, limits.context_length, limits.kv_block_size);
  if (budget.blocks <= limits.kv_total_blocks) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("sampling.max_tokens: the request needs ", budget.blocks, " KV blocks (",
                   num_prompt_tokens, " prompt tokens, up to ", budget.output_tokens,
                   " output tokens x n = ", std::max(n, 1), ") but a worker's KV pool holds ",
                   limits.kv_total_blocks, " blocks of ", limits.kv_block_size, " tokens"));
}

absl::Status ValidateWorkerGenerateRequest(const v1::WorkerGenerateRequest& request,
                                           const ServingLimits& limits) {
  if (request.request_id().empty()) return Invalid("request_id", "must not be empty");
  KVSERVE_RETURN_IF_ERROR(CheckRequestId(request.request_id()));
  KVSERVE_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling(), limits, "sampling"));
  if (request.prompt_token_ids_size() == 0) {
    return Invalid("prompt_token_ids", "must not be empty");
  }
  if (request.choices_size() == 0) return Invalid("choices", "must not be empty");
  const int32_t n = std::max(request.sampling().n(), 1);
  std::vector<bool> seen(n, false);
  for (int i = 0; i < request.choices_size(); ++i) {
    const v1::WorkerChoice& choice = request.choices(i);
    const std::string path = absl::StrCat("choices[", i, "]");
    if (choice.index() < 0 || choice.index() >= n) {
      return Invalid(Field(path, "index"),
                     absl::StrCat("must be in [0, ", n, "), got ", choice.index()));
    }
    if (seen[choice.index()]) {
      return Invalid(Field(path, "index"), absl::StrCat("duplicate index ", choice.index()));
    }
    seen[choice.index()] = true;
    for (int k = 0; k < choice.generated_token_ids_size(); ++k) {
      const int32_t id = choice.generated_token_ids(k);
      if (id < 0 || id >= limits.vocab_size) {
        return Invalid(absl::StrCat(path, ".generated_token_ids[", k, "]"),
                       absl::StrCat("token id ", id, " is outside [0, ", limits.vocab_size, ")"));
      }
    }
    if (choice.emitted_text_bytes() < 0) {
      return Invalid(Field(path, "emitted_text_bytes"), "must be >= 0");
    }
  }
  if (request.has_kv_source()) {
    if (request.kv_source().address().empty()) {
      return Invalid("kv_source.address", "must not be empty");
    }
    if (request.kv_source().num_blocks() < 0) {
      return Invalid("kv_source.num_blocks",
                     absl::StrCat("must be >= 0, got ", request.kv_source().num_blocks()));
    }
  }
  if (request.progress_interval_ms() < 0) {
    return Invalid("progress_interval_ms",
                   absl::StrCat("must be >= 0, got ", request.progress_interval_ms()));
  }
  return ValidatePromptTokens(request.prompt_token_ids(), limits, "prompt_token_ids");
}

absl::Status ValidateFetchKvBlocksRequest(const v1::FetchKvBlocksRequest& request) {
  if (request.token_ids_size() == 0) return Invalid("token_ids", "must not be empty");
  if (request.first_block() < 0) {
    return Invalid("first_block", absl::StrCat("must be >= 0, got ", request.first_block()));
  }
  if (request.max_blocks() < 0) {
    return Invalid("max_blocks", absl::StrCat("must be >= 0, got ", request.max_blocks()));
  }
  return absl::OkStatus();
}

}  // namespace kvserve
