// Request validation at the API boundary: every bad input gives its status code and a message
// that starts with the field path (request_validation.h, raw_message.h), and good input passes.
#include "api/request_validation.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/raw_message.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using ::kvserve::testing::StatusIs;
using ::testing::_;
using ::testing::HasSubstr;
using ::testing::StartsWith;

ServingLimits TestLimits() {
  ServingLimits limits;
  limits.model_name = "test-model";
  limits.vocab_size = 1000;
  limits.context_length = 256;
  limits.max_prompt_tokens = 255;
  limits.max_tokens = 255;
  limits.max_n = 4;
  limits.max_logprobs = 5;
  limits.max_stop_strings = 2;
  limits.max_stop_string_bytes = 8;
  limits.chat_supported = true;
  limits.kv_block_size = 16;
  limits.kv_total_blocks = 32;  // 512 tokens
  return limits;
}

v1::GenerateRequest PromptRequest(const std::string& prompt) {
  v1::GenerateRequest request;
  request.set_prompt(prompt);
  return request;
}

// Asserts the code and that the message starts with `field` + ": ".
void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& field) {
  EXPECT_THAT(status, StatusIs(code, StartsWith(field + ": ")));
}

TEST(ValidateGenerateRequest, AcceptsEachInputKind) {
  const ServingLimits limits = TestLimits();
  KVSERVE_EXPECT_OK(ValidateGenerateRequest(PromptRequest("hello"), limits));
  v1::GenerateRequest ids;
  ids.mutable_prompt_token_ids()->add_ids(5);
  KVSERVE_EXPECT_OK(ValidateGenerateRequest(ids, limits));
  v1::GenerateRequest chat;
  v1::ChatMessage* message = chat.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("hi");
  KVSERVE_EXPECT_OK(ValidateGenerateRequest(chat, limits));
}

TEST(ValidateGenerateRequest, RefusesMissingOrEmptyInput) {
  const ServingLimits limits = TestLimits();
  ExpectError(ValidateGenerateRequest(v1::GenerateRequest(), limits),
              absl::StatusCode::kInvalidArgument, "input");
  ExpectError(ValidateGenerateRequest(PromptRequest(""), limits),
              absl::StatusCode::kInvalidArgument, "prompt");
  v1::GenerateRequest ids;
  ids.mutable_prompt_token_ids();
  ExpectError(ValidateGenerateRequest(ids, limits), absl::StatusCode::kInvalidArgument,
              "prompt_token_ids.ids");
  v1::GenerateRequest chat;
  chat.mutable_chat();
  ExpectError(ValidateGenerateRequest(chat, limits), absl::StatusCode::kInvalidArgument,
              "chat.messages");
}

TEST(ValidateGenerateRequest, RefusesBadChatRoleAndChatWithoutTemplate) {
  ServingLimits limits = TestLimits();
  v1::GenerateRequest chat;
  chat.mutable_chat()->add_messages()->set_role("user");
  chat.mutable_chat()->add_messages()->set_role("wizard");
  const absl::Status status = ValidateGenerateRequest(chat, limits);
  ExpectError(status, absl::StatusCode::kInvalidArgument, "chat.messages[1].role");
  EXPECT_THAT(status, StatusIs(_, HasSubstr("wizard")));
  limits.chat_supported = false;
  chat.mutable_chat()->mutable_messages(1)->set_role("assistant");
  ExpectError(ValidateGenerateRequest(chat, limits), absl::StatusCode::kInvalidArgument, "chat");
}

TEST(ValidateGenerateRequest, AcceptsToolsToolCallsAndToolResults) {
  const ServingLimits limits = TestLimits();
  v1::GenerateRequest request;
  v1::ChatConversation* chat = request.mutable_chat();
  chat->add_messages()->set_role("user");
  v1::ChatMessage* assistant = chat->add_messages();
  assistant->set_role("assistant");
  v1::ChatToolCall* call = assistant->add_tool_calls();
  call->set_id("call_1");
  call->set_name("get_weather");
  call->set_arguments(R"({"city": "Paris"})");
  assistant->add_tool_calls()->set_name("no-arguments_2");
  v1::ChatMessage* result = chat->add_messages();
  result->set_role("tool");
  result->set_tool_call_id("call_1");
  result->set_content("18 C");
  v1::ChatTool* tool = chat->add_tools();
  tool->set_name("get_weather");
  tool->set_parameters(R"({"type": "object"})");
  chat->add_tools()->set_name("no_parameters");
  KVSERVE_EXPECT_OK(ValidateGenerateRequest(request, limits));
}

TEST(ValidateGenerateRequest, RefusesBadToolsAndToolCallsNamingTheField) {
  const ServingLimits limits = TestLimits();
  struct Case {
    std::function<void(v1::ChatConversation*)> spoil;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::ChatConversation* c) { c->mutable_messages(0)->add_tool_calls()->set_name("f"); },
       "chat.messages[0].tool_calls: only assistant messages make tool calls"},
      {[](v1::ChatConversation* c) { c->mutable_messages(1)->add_tool_calls()->set_name("a b"); },
       "chat.messages[1].tool_calls[0].name: only characters from [A-Za-z0-9_-]"},
      {[](v1::ChatConversation* c) { c->mutable_messages(1)->add_tool_calls(); },
       "chat.messages[1].tool_calls[0].name: must be 1 to 64 characters, got 0"},
      {[](v1::ChatConversation* c) {
         v1::ChatToolCall* call = c->mutable_messages(1)->add_tool_calls();
         call->set_name("f");
         call->set_arguments("{\"city\": ");
       },
       "chat.messages[1].tool_calls[0].arguments: must be JSON text (it does not parse)"},
      {[](v1::ChatConversation* c) {
         v1::ChatToolCall* call = c->mutable_messages(1)->add_tool_calls();
         call->set_name("f");
         call->set_arguments("[1, 2]");
       },
       "chat.messages[1].tool_calls[0].arguments: must be the JSON text of an object"},
      {[](v1::ChatConversation* c) { c->add_tools()->set_name(std::string(65, 'x')); },
       "chat.tools[0].name: must be 1 to 64 characters, got 65"},
      {[](v1::ChatConversation* c) {
         c->add_tools()->set_name("f");
         c->add_tools()->set_name("f");
       },
       "chat.tools[1].name: 'f' is given twice"},
      {[](v1::ChatConversation* c) {
         v1::ChatTool* tool = c->add_tools();
         tool->set_name("f");
         tool->set_parameters("\"object\"");
       },
       "chat.tools[0].parameters: must be the JSON text of an object"},
      {[](v1::ChatConversation* c) {
         for (int i = 0; i < 129; ++i) c->add_tools()->set_name(absl::StrCat("f", i));
       },
       "chat.tools: at most 128 tools, got 129"},
      {[](v1::ChatConversation* c) { c->mutable_messages(0)->set_role("function"); },
       "chat.messages[0].role: must be system, user, assistant or tool, got 'function'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    v1::GenerateRequest request;
    request.mutable_chat()->add_messages()->set_role("user");
    request.mutable_chat()->add_messages()->set_role("assistant");
    c.spoil(request.mutable_chat());
    const absl::Status status = ValidateGenerateRequest(request, limits);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message().substr(0, c.field.size()), c.field) << status.message();
  }
}

TEST(ValidateSamplingParams, StructuredOutputFormsAndTheirLimits) {
  const ServingLimits limits = TestLimits();
  struct Case {
    std::function<void(v1::SamplingParams*)> set;
    std::string error;  // "" when valid
  };
  const std::vector<Case> cases = {
      {[](v1::SamplingParams* s) { s->mutable_structured_output()->set_json_object(true); }, ""},
      {[](v1::SamplingParams* s) {
         s->mutable_structured_output()->set_json_schema(R"({"type": "object"})");
       },
       ""},
      {[](v1::SamplingParams* s) { s->mutable_structured_output()->set_regex("[0-9]+"); }, ""},
      {[](v1::SamplingParams* s) {
         s->mutable_structured_output()->mutable_choice()->add_choices("yes");
       },
       ""},
      {[](v1::SamplingParams* s) { s->mutable_structured_output(); },
       "sampling.structured_output: one of json_object, json_schema, regex, choice, grammar"},
      {[](v1::SamplingParams* s) { s->mutable_structured_output()->set_json_object(false); },
       "sampling.structured_output.json_object: must be true"},
      {[](v1::SamplingParams* s) { s->mutable_structured_output()->set_json_schema("[1]"); },
       "sampling.structured_output.json_schema: must be the JSON text of an object"},
      {[](v1::SamplingParams* s) { s->mutable_structured_output()->set_grammar(""); },
       "sampling.structured_output.grammar: must not be empty"},
      {[](v1::SamplingParams* s) {
         s->mutable_structured_output()->set_regex(std::string(64 * 1024 + 1, 'a'));
       },
       "sampling.structured_output.regex: at most 65536 bytes"},
      {[](v1::SamplingParams* s) { s->mutable_structured_output()->mutable_choice(); },
       "sampling.structured_output.choice.choices: 1 to 256 choices, got 0"},
      {[](v1::SamplingParams* s) {
         s->mutable_structured_output()->set_json_object(true);
         s->set_ignore_eos(true);
       },
       "sampling.structured_output: cannot be combined with ignore_eos"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error);
    v1::SamplingParams sampling;
    c.set(&sampling);
    const absl::Status status = ValidateSamplingParams(sampling, limits, "sampling");
    if (c.error.empty()) {
      KVSERVE_EXPECT_OK(status);
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(status.message().substr(0, c.error.size()), c.error) << status.message();
    }
  }
}

TEST(ValidateGenerateRequest, RefusesInvalidUtf8InEveryTextField) {
  const ServingLimits limits = TestLimits();
  const std::string bad = "ok \xC3\x28 then";  // 0xC3 needs a continuation byte
  ExpectError(ValidateGenerateRequest(PromptRequest(bad), limits),
              absl::StatusCode::kInvalidArgument, "prompt");
  v1::GenerateRequest chat;
  v1::ChatMessage* message = chat.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content(bad);
  ExpectError(ValidateGenerateRequest(chat, limits), absl::StatusCode::kInvalidArgument,
              "chat.messages[0].content");
  v1::GenerateRequest stop = PromptRequest("x");
  stop.mutable_sampling()->add_stop("\xFF");
  ExpectError(ValidateGenerateRequest(stop, limits), absl::StatusCode::kInvalidArgument,
              "sampling.stop[0]");
}

TEST(ValidateGenerateRequest, RefusesOtherModelWithNotFound) {
  v1::GenerateRequest request = PromptRequest("x");
  request.set_model("other");
  ExpectError(ValidateGenerateRequest(request, TestLimits()), absl::StatusCode::kNotFound, "model");
  request.set_model("test-model");
  KVSERVE_EXPECT_OK(ValidateGenerateRequest(request, TestLimits()));
}

TEST(ValidateGenerateRequest, AcceptsTheModelInfoAliases) {
  v1::ModelInfo info;
  info.set_name("SmolLM2-135M-Instruct");
  info.add_aliases("Smollm2 135M 8k Lc100K Mix1 Ep2");
  const ServingLimits limits = ServingLimitsFromModelInfo(info, 32);
  KVSERVE_EXPECT_OK(ValidateModelName("SmolLM2-135M-Instruct", limits));
  KVSERVE_EXPECT_OK(ValidateModelName("Smollm2 135M 8k Lc100K Mix1 Ep2", limits));
  ExpectError(ValidateModelName("Smollm2", limits), absl::StatusCode::kNotFound, "model");
}

TEST(ValidateGenerateRequest, RefusesBadRequestIdAndPriority) {
  v1::GenerateRequest request = PromptRequest("x");
  request.set_request_id("has space");
  ExpectError(ValidateGenerateRequest(request, TestLimits()), absl::StatusCode::kInvalidArgument,
              "request_id");
  request.set_request_id(std::string(129, 'a'));
  ExpectError(ValidateGenerateRequest(request, TestLimits()), absl::StatusCode::kInvalidArgument,
              "request_id");
  request.set_request_id("ok-1.2:3_4");
  request.set_priority(101);
  ExpectError(ValidateGenerateRequest(request, TestLimits()), absl::StatusCode::kInvalidArgument,
              "priority");
}

struct BadSampling {
  const char* name;
  void (*set)(v1::SamplingParams*);
  const char* field;
};

class ValidateSamplingBad : public ::testing::TestWithParam<BadSampling> {};

TEST_P(ValidateSamplingBad, RefusedWithFieldNamed) {
  v1::GenerateRequest request = PromptRequest("x");
  GetParam().set(request.mutable_sampling());
  ExpectError(ValidateGenerateRequest(request, TestLimits()), absl::StatusCode::kInvalidArgument,
              GetParam().field);
}

const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

INSTANTIATE_TEST_SUITE_P(
    AllFields, ValidateSamplingBad,
    ::testing::Values(
        BadSampling{"NegativeTemperature", [](v1::SamplingParams* s) { s->set_temperature(-0.1f); },
                    "sampling.temperature"},
        BadSampling{"NanTemperature", [](v1::SamplingParams* s) { s->set_temperature(kNan); },
                    "sampling.temperature"},
        BadSampling{"InfTemperature", [](v1::SamplingParams* s) { s->set_temperature(kInf); },
                    "sampling.temperature"},
        BadSampling{"NegativeTopK", [](v1::SamplingParams* s) { s->set_top_k(-1); },
                    "sampling.top_k"},
        BadSampling{"ZeroTopP", [](v1::SamplingParams* s) { s->set_top_p(0.0f); },
                    "sampling.top_p"},
        BadSampling{"TopPAboveOne", [](v1::SamplingParams* s) { s->set_top_p(1.5f); },
                    "sampling.top_p"},
        BadSampling{"NanTopP", [](v1::SamplingParams* s) { s->set_top_p(kNan); }, "sampling.top_p"},
        BadSampling{"MinPAboveOne", [](v1::SamplingParams* s) { s->set_min_p(2.0f); },
                    "sampling.min_p"},
        BadSampling{"ZeroRepetitionPenalty",
                    [](v1::SamplingParams* s) { s->set_repetition_penalty(0.0f); },
                    "sampling.repetition_penalty"},
        BadSampling{"PresencePenaltyTooLarge",
                    [](v1::SamplingParams* s) { s->set_presence_penalty(2.5f); },
                    "sampling.presence_penalty"},
        BadSampling{"FrequencyPenaltyNan",
                    [](v1::SamplingParams* s) { s->set_frequency_penalty(kNan); },
                    "sampling.frequency_penalty"},
        BadSampling{"NegativeMaxTokens", [](v1::SamplingParams* s) { s->set_max_tokens(-1); },
                    "sampling.max_tokens"},
        BadSampling{"MaxTokensBeyondContext", [](v1::SamplingParams* s) { s->set_max_tokens(256); },
                    "sampling.max_tokens"},
        BadSampling{"TooManyStopStrings",
                    [](v1::SamplingParams* s) {
                      for (int i = 0; i < 3; ++i) s->add_stop("s");
                    },
                    "sampling.stop"},
        BadSampling{"EmptyStopString", [](v1::SamplingParams* s) { s->add_stop(""); },
                    "sampling.stop[0]"},
        BadSampling{"StopStringTooLong",
                    [](v1::SamplingParams* s) {
                      s->add_stop("ok");
                      s->add_stop("123456789");
                    },
                    "sampling.stop[1]"},
        BadSampling{"StopTokenOutOfVocab",
                    [](v1::SamplingParams* s) { s->add_stop_token_ids(1000); },
                    "sampling.stop_token_ids[0]"},
        BadSampling{"NegativeLogprobs", [](v1::SamplingParams* s) { s->set_logprobs(-1); },
                    "sampling.logprobs"},
        BadSampling{"TooManyLogprobs", [](v1::SamplingParams* s) { s->set_logprobs(6); },
                    "sampling.logprobs"},
        BadSampling{"NegativePromptLogprobs",
                    [](v1::SamplingParams* s) { s->set_prompt_logprobs(-1); },
                    "sampling.prompt_logprobs"},
        BadSampling{"TooManyPromptLogprobs",
                    [](v1::SamplingParams* s) { s->set_prompt_logprobs(6); },
                    "sampling.prompt_logprobs"},
        BadSampling{"NegativeN", [](v1::SamplingParams* s) { s->set_n(-1); }, "sampling.n"},
        BadSampling{"NTooLarge", [](v1::SamplingParams* s) { s->set_n(5); }, "sampling.n"}),
    [](const ::testing::TestParamInfo<BadSampling>& info) { return info.param.name; });

TEST(ValidateSamplingParams, AcceptsBoundaryValues) {
  v1::SamplingParams sampling;
  sampling.set_temperature(0.0f);
  sampling.set_top_p(1.0f);
  sampling.set_min_p(1.0f);
  sampling.set_presence_penalty(-2.0f);
  sampling.set_frequency_penalty(2.0f);
  sampling.set_max_tokens(255);
  sampling.set_logprobs(0);
  sampling.set_prompt_logprobs(5);
  sampling.set_n(4);
  sampling.add_stop("12345678");
  sampling.add_stop_token_ids(999);
  KVSERVE_EXPECT_OK(ValidateSamplingParams(sampling, TestLimits(), "sampling"));
}

TEST(ValidatePromptTokens, RefusesEmptyUnknownIdAndTooLong) {
  const ServingLimits limits = TestLimits();
  ExpectError(ValidatePromptTokens({}, limits, "prompt_token_ids.ids"),
              absl::StatusCode::kInvalidArgument, "input");
  const std::vector<int32_t> unknown = {1, 2, 1000};
  const absl::Status status = ValidatePromptTokens(unknown, limits, "prompt_token_ids.ids");
  ExpectError(status, absl::StatusCode::kInvalidArgument, "prompt_token_ids.ids[2]");
  EXPECT_THAT(status, StatusIs(_, HasSubstr("1000")));
  ExpectError(ValidatePromptTokens(std::vector<int32_t>{-1}, limits, "ids"),
              absl::StatusCode::kInvalidArgument, "ids[0]");
  const std::vector<int32_t> too_long(256, 7);
  ExpectError(ValidatePromptTokens(too_long, limits, "ids"), absl::StatusCode::kInvalidArgument,
              "input");
  KVSERVE_EXPECT_OK(ValidatePromptTokens(std::vector<int32_t>(255, 7), limits, "ids"));
}

TEST(ValidateKvFit, RefusesRequestThatCouldNeverFitThePool) {
  const ServingLimits limits = TestLimits();              // 32 blocks of 16 tokens
  KVSERVE_EXPECT_OK(ValidateKvFit(100, 150, 1, limits));  // 250 tokens: 16 blocks
  // 4 choices of 150 tokens after 100 prompt tokens: 6 shared + 4 * 10 blocks > 32.
  const absl::Status status = ValidateKvFit(100, 150, 4, limits);
  ExpectError(status, absl::StatusCode::kResourceExhausted, "sampling.max_tokens");
  EXPECT_THAT(status, StatusIs(_, HasSubstr("46 KV blocks")));
  // max_tokens 0 means to the end of the 256-token context: 16 blocks, fits.
  KVSERVE_EXPECT_OK(ValidateKvFit(100, 0, 1, limits));
}

TEST(ValidateKvFit, CapsMaxTokensAtTheContextLength) {
  ServingLimits limits = TestLimits();
  limits.kv_total_blocks = 16;  // exactly the 256-token context
  // 5 prompt tokens + the advertised max_tokens (255) would be 260 tokens, 17 blocks; capped at
  // the context it is 256 tokens, 16 blocks, which the pool holds.
  KVSERVE_EXPECT_OK(ValidateKvFit(5, limits.max_tokens, 1, limits));
}

TEST(ServingLimitsFromModelInfo, RoundTripsThePublishedLimits) {
  ServingLimits limits = TestLimits();
  limits.model_context_length = 8192;
  limits.max_stop_token_ids = 7;
  limits.max_chat_messages = 9;
  v1::ModelInfo info;
  info.set_name(limits.model_name);
  info.set_vocab_size(limits.vocab_size);
  info.set_context_length(limits.model_context_length);
  info.set_pool_limited_context_length(limits.context_length);
  info.set_kv_block_size(limits.kv_block_size);
  info.set_chat_template_format("chatml");
  *info.mutable_limits() = ToProtoLimits(limits);
  const ServingLimits back = ServingLimitsFromModelInfo(info, limits.kv_total_blocks);
  EXPECT_EQ(back.model_name, limits.model_name);
  EXPECT_EQ(back.vocab_size, limits.vocab_size);
  EXPECT_EQ(back.model_context_length, 8192);
  EXPECT_EQ(back.context_length, limits.context_length);
  EXPECT_EQ(back.max_prompt_tokens, limits.max_prompt_tokens);
  EXPECT_EQ(back.max_tokens, limits.max_tokens);
  EXPECT_EQ(back.max_n, limits.max_n);
  EXPECT_EQ(back.max_logprobs, limits.max_logprobs);
  EXPECT_EQ(back.max_stop_strings, limits.max_stop_strings);
  EXPECT_EQ(back.max_stop_string_bytes, limits.max_stop_string_bytes);
  EXPECT_EQ(back.max_stop_token_ids, 7);
  EXPECT_EQ(back.max_chat_messages, 9);
  EXPECT_TRUE(back.chat_supported);
  EXPECT_EQ(back.kv_block_size, limits.kv_block_size);
  EXPECT_EQ(back.kv_total_blocks, limits.kv_total_blocks);
}

TEST(ValidateTokenizeRequest, RefusesMissingInputAndBadUtf8) {
  ExpectError(ValidateTokenizeRequest(v1::TokenizeRequest(), TestLimits()),
              absl::StatusCode::kInvalidArgument, "input");
  v1::TokenizeRequest request;
  request.set_prompt("\xE2\x82");  // truncated 3-byte sequence
  ExpectError(ValidateTokenizeRequest(request, TestLimits()), absl::StatusCode::kInvalidArgument,
              "prompt");
  request.set_prompt("");  // empty text tokenizes to nothing; allowed
  KVSERVE_EXPECT_OK(ValidateTokenizeRequest(request, TestLimits()));
}

TEST(ValidateWorkerGenerateRequest, RefusesBadChoicesAndIds) {
  v1::WorkerGenerateRequest request;
  request.set_request_id("r1");
  request.add_prompt_token_ids(3);
  request.mutable_sampling()->set_n(2);
  request.add_choices()->set_index(0);
  KVSERVE_EXPECT_OK(ValidateWorkerGenerateRequest(request, TestLimits()));
  request.add_choices()->set_index(0);
  ExpectError(ValidateWorkerGenerateRequest(request, TestLimits()),
              absl::StatusCode::kInvalidArgument, "choices[1].index");
  request.mutable_choices(1)->set_index(2);
  ExpectError(ValidateWorkerGenerateRequest(request, TestLimits()),
              absl::StatusCode::kInvalidArgument, "choices[1].index");
  request.mutable_choices(1)->set_index(1);
  request.mutable_choices(1)->add_generated_token_ids(5000);
  ExpectError(ValidateWorkerGenerateRequest(request, TestLimits()),
              absl::StatusCode::kInvalidArgument, "choices[1].generated_token_ids[0]");
  request.clear_choices();
  ExpectError(ValidateWorkerGenerateRequest(request, TestLimits()),
              absl::StatusCode::kInvalidArgument, "choices");
  request.add_choices()->set_index(0);
  request.clear_request_id();
  ExpectError(ValidateWorkerGenerateRequest(request, TestLimits()),
              absl::StatusCode::kInvalidArgument, "request_id");
}

TEST(ValidateWorkerGenerateRequest, RefusesANegativeProgressInterval) {
  v1::WorkerGenerateRequest request;
  request.set_request_id("r1");
  request.add_prompt_token_ids(3);
  request.add_choices()->set_index(0);
  request.set_progress_interval_ms(250);
  KVSERVE_EXPECT_OK(ValidateWorkerGenerateRequest(request, TestLimits()));
  request.set_progress_interval_ms(-1);
  ExpectError(ValidateWorkerGenerateRequest(request, TestLimits()),
              absl::StatusCode::kInvalidArgument, "progress_interval_ms");
}

TEST(ValidateFetchKvBlocksRequest, NamesTheBadField) {
  v1::FetchKvBlocksRequest request;
  EXPECT_THAT(ValidateFetchKvBlocksRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("token_ids: ")));
  request.add_token_ids(5);
  KVSERVE_EXPECT_OK(ValidateFetchKvBlocksRequest(request));
  request.set_first_block(-1);
  EXPECT_THAT(ValidateFetchKvBlocksRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("first_block: ")));
  request.set_first_block(0);
  request.set_max_blocks(-2);
  EXPECT_THAT(ValidateFetchKvBlocksRequest(request),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("max_blocks: ")));
}

TEST(IsValidUtf8, AcceptsWellFormedAndRefusesIllFormed) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));  // é € 😀
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));                             // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));                         // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));                     // past U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\x80"));                                 // lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\x98"));                         // truncated
}

TEST(ParseRequest, NamesTheFieldWithInvalidUtf8InRawBytes) {
  // protobuf refuses to parse a proto3 string with invalid UTF-8; ParseRequest finds which.
  v1::GenerateRequest request;
  v1::ChatMessage* first = request.mutable_chat()->add_messages();
  first->set_role("system");
  first->set_content("fine");
  v1::ChatMessage* second = request.mutable_chat()->add_messages();
  second->set_role("user");
  second->set_content("PLACEHOLDER");
  std::string bytes = request.SerializeAsString();
  bytes.replace(bytes.find("PLACEHOLDER"), 11, "bad\xFF\xFE bytes");
  grpc::Slice slice(bytes);
  grpc::ByteBuffer buffer(&slice, 1);
  v1::GenerateRequest parsed;
  ExpectError(ParseRequest(buffer, &parsed), absl::StatusCode::kInvalidArgument,
              "chat.messages[1].content");

  grpc::ByteBuffer good = ToByteBuffer(request);
  KVSERVE_ASSERT_OK(ParseRequest(good, &parsed));
  EXPECT_EQ(parsed.chat().messages(1).content(), "PLACEHOLDER");

  grpc::Slice garbage(std::string("\xFF\xFF\xFF"));
  ExpectError(ParseRequest(grpc::ByteBuffer(&garbage, 1), &parsed),
              absl::StatusCode::kInvalidArgument, "request");
}

}  // namespace
}  // namespace kvserve
