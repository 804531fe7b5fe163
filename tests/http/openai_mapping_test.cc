// The OpenAI JSON mapping: every request field into kvserve.v1, every wrong type refused with
// the field named, and responses (bodies, SSE chunks, logprobs, usage) in OpenAI's shape (tool
// calls in responses: openai_tool_calls_test.cc).
#include "http/openai_mapping.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "http/openai_response.h"
#include "tests/http/openai_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using Json = nlohmann::json;
using ::kvserve::testing::Chat;
using ::kvserve::testing::Delta;
using ::kvserve::testing::Options;
using ::kvserve::testing::StatusIs;
using ::testing::_;
using ::testing::HasSubstr;
using ::testing::StartsWith;

OpenAiRequest Completion(const std::string& body, const OpenAiMappingOptions& options = Options()) {
  absl::StatusOr<OpenAiRequest> parsed =
      ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, options);
  KVSERVE_EXPECT_OK(parsed);
  return parsed.ok() ? *parsed : OpenAiRequest();
}

absl::Status CompletionError(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kCompletions, body, Options()).status();
}

absl::Status ChatError(const std::string& body) {
  return ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, body, Options()).status();
}

TEST(OpenAiMappingTest, EverySamplingFieldOfACompletionReachesSamplingParams) {
  const OpenAiRequest request = Completion(R"({
    "model": "SmolLM2", "prompt": "Hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
    "top_k": 40, "min_p": 0.05, "n": 2, "stop": ["a", "b"], "seed": 42,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "logprobs": 3, "ignore_eos": true, "user": "u1", "priority": 5,
    "stop_token_ids": [1, 2], "include_stop_str_in_output": true,
    "skip_special_tokens": false, "add_special_tokens": false})");
  ASSERT_EQ(request.requests.size(), 1u);
  const v1::GenerateRequest& generate = request.requests[0];
  EXPECT_EQ(generate.model(), "SmolLM2");
  EXPECT_EQ(generate.prompt(), "Hi");
  EXPECT_EQ(generate.priority(), 5);
  EXPECT_FALSE(generate.add_special_tokens());
  const v1::SamplingParams& s = generate.sampling();
  EXPECT_EQ(s.max_tokens(), 7);
  EXPECT_FLOAT_EQ(s.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_EQ(s.top_k(), 40);
  EXPECT_FLOAT_EQ(s.min_p(), 0.05f);
  EXPECT_EQ(s.n(), 2);
  EXPECT_THAT(s.stop(), ::testing::ElementsAre("a", "b"));
  EXPECT_EQ(s.seed(), 42u);
  EXPECT_FLOAT_EQ(s.presence_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), -0.5f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.1f);
  EXPECT_EQ(s.logprobs(), 3);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_THAT(s.stop_token_ids(), ::testing::ElementsAre(1, 2));
  EXPECT_TRUE(s.include_stop_str_in_output());
  EXPECT_TRUE(s.detokenize_special_tokens());
  EXPECT_EQ(request.n, 2);
  EXPECT_TRUE(request.logprobs);
  EXPECT_EQ(request.top_logprobs, 3);
}

TEST(OpenAiMappingTest, UnsetFieldsStayUnsetExceptCompletionsDefaultLength) {
  const OpenAiRequest request = Completion(R"({"prompt": "Hi", "temperature": null})");
  const v1::SamplingParams& s = request.requests[0].sampling();
  EXPECT_FALSE(s.has_temperature());
  EXPECT_FALSE(s.has_top_p());
  EXPECT_FALSE(s.has_seed());
  EXPECT_FALSE(s.has_logprobs());
  EXPECT_EQ(s.max_tokens(), 16);  // OpenAI's default for completions
  EXPECT_EQ(request.requests[0].model(), "");
  EXPECT_FALSE(request.stream);
  EXPECT_EQ(Chat(R"({"messages": [{"role": "user", "content": "x"}]})")
                .requests[0]
                .sampling()
                .max_tokens(),
            0);  // chat: to the end of the context
}

TEST(OpenAiMappingTest, PromptFormsStringsTokenIdsAndBatches) {
  EXPECT_EQ(Completion(R"({"prompt": ["one"]})").requests[0].prompt(), "one");
  const OpenAiRequest ids = Completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(ids.requests.size(), 1u);
  EXPECT_THAT(ids.requests[0].prompt_token_ids().ids(), ::testing::ElementsAre(1, 2, 3));
  const OpenAiRequest batch = Completion(R"({"prompt": ["a", [5, 6]], "max_tokens": 3})");
  ASSERT_EQ(batch.requests.size(), 2u);
  EXPECT_EQ(batch.requests[0].prompt(), "a");
  EXPECT_THAT(batch.requests[1].prompt_token_ids().ids(), ::testing::ElementsAre(5, 6));
  EXPECT_EQ(batch.requests[1].sampling().max_tokens(), 3);  // sampling shared by every prompt
}

TEST(OpenAiMappingTest, ChatMessagesAndTheirFields) {
  const OpenAiRequest request = Chat(R"({
    "model": "smol",
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": [{"type": "text", "text": "a"},
                                              {"type": "text", "text": "b"}]}],
    "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 2, "stream": true,
    "stream_options": {"include_usage": true}, "add_generation_prompt": false, "stop": "x"})");
  const v1::GenerateRequest& generate = request.requests[0];
  EXPECT_EQ(generate.model(), "SmolLM2");  // alias resolved
  EXPECT_EQ(request.model, "smol");        // echoed as sent
  ASSERT_EQ(generate.chat().messages_size(), 2);
  EXPECT_EQ(generate.chat().messages(0).role(), "system");
  EXPECT_EQ(generate.chat().messages(1).content(), "ab");
  EXPECT_EQ(generate.sampling().max_tokens(), 9);
  EXPECT_EQ(generate.sampling().logprobs(), 2);
  EXPECT_THAT(generate.sampling().stop(), ::testing::ElementsAre("x"));
  EXPECT_FALSE(generate.add_generation_prompt());
  EXPECT_TRUE(request.stream);
  EXPECT_TRUE(request.include_usage);
  EXPECT_TRUE(request.logprobs);
  EXPECT_EQ(request.top_logprobs, 2);
  // max_tokens wins over max_completion_tokens; top_k -1 is vLLM's "off".
  EXPECT_EQ(Chat(R"({"messages": [], "max_tokens": 3, "max_completion_tokens": 9,
                     "top_k": -1})")
                .requests[0]
                .sampling()
                .max_tokens(),
            3);
  EXPECT_EQ(Chat(R"({"messages": [], "top_k": -1})").requests[0].sampling().top_k(), 0);
}

TEST(OpenAiMappingTest, UnknownModelNamesPassThroughForTheValidationLibraryToRefuse) {
  EXPECT_EQ(Completion(R"({"model": "gpt-4", "prompt": "x"})").requests[0].model(), "gpt-4");
  EXPECT_EQ(ResolveModelName("gpt-3.5-turbo", Options()), "SmolLM2");
}

TEST(OpenAiMappingTest, MalformedJsonAndWrongTypesAreRefusedNamingTheField) {
  struct Case {
    std::string body;
    std::string prefix;
  };
  const Case cases[] = {
      {"{not json", "body: not valid JSON"},
      {"[1, 2]", "body: must be a JSON object"},
      {"{\"prompt\": \"\xff\xfe\"}", "body: not valid JSON"},  // invalid UTF-8
      {R"({})", "prompt: is required"},
      {R"({"prompt": 5})", "prompt: must be a string"},
      {R"({"prompt": []})", "prompt: must not be empty"},
      {R"({"prompt": [1, "a"]})", "prompt[1]: must be an integer token id"},
      {R"({"prompt": ["a", 7]})", "prompt[1]: must be a string or a list of token ids"},
      {R"({"prompt": [99999999999]})", "prompt[0]: token id out of range"},
      {R"({"prompt": "x", "model": 3})", "model: must be a string, got integer"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature: must be a number, got string"},
      {R"({"prompt": "x", "top_p": true})", "top_p: must be a number"},
      {R"({"prompt": "x", "top_k": 1.5})", "top_k: must be an integer"},
      {R"({"prompt": "x", "min_p": []})", "min_p: must be a number"},
      {R"({"prompt": "x", "n": "2"})", "n: must be an integer"},
      {R"({"prompt": "x", "n": 0})", "n: must be in [1, 8], got 0"},
      {R"({"prompt": "x", "n": 9})", "n: must be in [1, 8], got 9"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens: must be in [1, 8191], got 0"},
      {R"({"prompt": "x", "max_tokens": 8192})", "max_tokens: must be in [1, 8191], got 8192"},
      {R"({"prompt": "x", "max_tokens": 5000000000})", "max_tokens: integer out of range"},
      {R"({"prompt": "x", "stop": 3})", "stop: must be a string or a list of strings"},
      {R"({"prompt": "x", "stop": ["a", 1]})", "stop[1]: must be a string"},
      {R"({"prompt": "x", "seed": 1.5})", "seed: must be an integer"},
      {R"({"prompt": "x", "presence_penalty": "a"})", "presence_penalty: must be a number"},
      {R"({"prompt": "x", "frequency_penalty": {}})", "frequency_penalty: must be a number"},
      {R"({"prompt": "x", "repetition_penalty": "a"})", "repetition_penalty: must be a number"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs: must be an integer"},
      {R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos: must be a boolean"},
      {R"({"prompt": "x", "user": 1})", "user: must be a string"},
      {R"({"prompt": "x", "priority": "high"})", "priority: must be an integer"},
      {R"({"prompt": "x", "stream": "yes"})", "stream: must be a boolean"},
      {R"({"prompt": "x", "stream_options": 1})", "stream_options: must be an object"},
      {R"({"prompt": "x", "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage: must be a boolean"},
      {R"({"prompt": "x", "stop_token_ids": [1.5]})", "stop_token_ids[0]: must be an integer"},
      {R"({"prompt": "x", "echo": 1})", "echo: must be a boolean"},
      {R"({"prompt": "x", "echo": true, "stream": true})", "echo: is not supported with stream"},
      {R"({"prompt": "x", "prompt_logprobs": true})", "prompt_logprobs: must be an integer"},
      {R"({"prompt": "x", "prompt_logprobs": 1, "stream": true})",
       "prompt_logprobs: is not supported with stream"},
      {R"({"prompt": "x", "best_of": 3})", "best_of: is not supported"},
      {R"({"prompt": "x", "suffix": "s"})", "suffix: is not supported"},
      {R"({"prompt": "x", "logit_bias": {"1": 2}})", "logit_bias: is not supported"},
  };
  for (const Case& c : cases) {
    const absl::Status status = CompletionError(c.body);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(c.prefix)))
        << c.body;
  }
}

TEST(OpenAiMappingTest, ChatSpecificErrorsNameTheField) {
  struct Case {
    std::string body;
    std::string prefix;
  };
  const Case cases[] = {
      {R"({})", "messages: is required"},
      {R"({"messages": "hi"})", "messages: must be a list"},
      {R"({"messages": [3]})", "messages[0]: must be an object"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role: is required"},
      {R"({"messages": [{"role": 1}]})", "messages[0].role: must be a string"},
      {R"({"messages": [{"role": "user", "content": 1}]})",
       "messages[0].content: must be a string or a list of parts"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type: only \"text\" parts are supported"},
      {R"({"messages": [], "logprobs": 2})", "logprobs: must be a boolean"},
      {R"({"messages": [], "top_logprobs": 2})", "top_logprobs: needs logprobs: true"},
      {R"({"messages": [], "echo": true})", "echo: is supported on /v1/completions only"},
      {R"({"messages": [], "max_completion_tokens": 0})",
       "max_completion_tokens: must be in [1, 8191], got 0"},
      {R"({"messages": [], "tools": [{"type": "function"}]})",
       "tools[0].function: an object is required"},
      {R"({"messages": [], "tools": [{"type": "retrieval", "function": {"name": "f"}}]})",
       "tools[0].type: only \"function\" is supported"},
      {R"({"messages": [], "tools": [{"type": "function", "function": {"name": "f", )"
       R"("parameters": []}}]})",
       "tools[0].function.parameters: must be an object"},
      {R"({"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}], )"
       R"("tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "tool_choice.function.name: \"g\" is not one of the tools"},
      {R"({"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}], )"
       R"("tool_choice": "required", "response_format": {"type": "json_object"}})",
       "tool_choice: \"required\" or a named function cannot be combined"},
      {R"({"messages": [], "tool_choice": "auto"})", "tool_choice: \"auto\" needs tools"},
      {R"({"messages": [], "tool_choice": "required"})", "tool_choice: \"required\" needs tools"},
      {R"({"messages": [], "tool_choice": "always"})", "tool_choice: must be \"auto\""},
      {R"({"messages": [], "functions": [{"name": "f"}]})",
       "functions: is not supported (use tools)"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function"}]}]})",
       "messages[0].tool_calls[0].function: an object is required"},
      {R"({"messages": [{"role": "assistant", "tool_calls": {}}]})",
       "messages[0].tool_calls: must be a list"},
      {R"({"messages": [], "response_format": {"type": "xml"}})",
       "response_format.type: must be text, json_object or json_schema"},
      {R"({"messages": [], "response_format": {"type": "json_schema"}})",
       "response_format.json_schema: an object is required"},
      {R"({"messages": [], "response_format": {"type": "json_object"}, "guided_regex": "a+"})",
       "response_format: give one structured output form"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ChatError(c.body);
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(c.prefix)))
        << c.body;
  }
}

TEST(OpenAiMappingTest, ToolsToolCallsAndToolResultsReachTheChat) {
  OpenAiMappingOptions options = Options();
  options.tool_call_format = ToolCallFormat::kHermes;
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(OpenAiEndpoint::kChatCompletions, R"({
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Now",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
    "parallel_tool_calls": false})",
                                                            options);
  KVSERVE_ASSERT_OK(parsed);
  EXPECT_TRUE(parsed->parse_tool_calls);  // "auto" is the default with tools
  EXPECT_FALSE(parsed->parallel_tool_calls);
  EXPECT_EQ(parsed->tool_call_format, ToolCallFormat::kHermes);
  const v1::ChatConversation& chat = parsed->requests[0].chat();
  ASSERT_EQ(chat.messages_size(), 3);
  EXPECT_EQ(chat.messages(1).content(), "");
  ASSERT_EQ(chat.messages(1).tool_calls_size(), 1);
  EXPECT_EQ(chat.messages(1).tool_calls(0).id(), "call_1");
  EXPECT_EQ(chat.messages(1).tool_calls(0).name(), "get_weather");
  EXPECT_EQ(chat.messages(1).tool_calls(0).arguments(), R"({"city": "Paris"})");
  EXPECT_EQ(chat.messages(2).tool_call_id(), "call_1");
  EXPECT_EQ(chat.messages(2).name(), "get_weather");
  ASSERT_EQ(chat.tools_size(), 1);
  EXPECT_EQ(chat.tools(0).name(), "get_weather");
  EXPECT_EQ(chat.tools(0).description(), "Now");
  // The schema keeps the client's key order.
  EXPECT_EQ(chat.tools(0).parameters(),
            R"({"type":"object","properties":{"city":{"type":"string"}}})");

  parsed = ParseOpenAiRequest(
      OpenAiEndpoint::kChatCompletions,
      R"({"messages": [], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": "none"})",
      options);
  KVSERVE_ASSERT_OK(parsed);
  EXPECT_FALSE(parsed->parse_tool_calls);
  EXPECT_EQ(parsed->requests[0].chat().tools_size(), 1);  // still shown to the template
}

TEST(OpenAiMappingTest, TokenizeAndDetokenizeRequests) {
  absl::StatusOr<v1::TokenizeRequest> tokenize = ParseTokenizeRequest(
      R"({"model": "smol", "prompt": "Hi", "add_special_tokens": false})", Options());
  KVSERVE_ASSERT_OK(tokenize);
  EXPECT_EQ(tokenize->model(), "SmolLM2");
  EXPECT_EQ(tokenize->prompt(), "Hi");
  EXPECT_FALSE(tokenize->add_special_tokens());
  tokenize = ParseTokenizeRequest(R"({"messages": [{"role": "user", "content": "x"}]})", Options());
  KVSERVE_ASSERT_OK(tokenize);
  EXPECT_EQ(tokenize->chat().messages_size(), 1);
  EXPECT_THAT(ParseTokenizeRequest("{}", Options()), StatusIs(_, StartsWith("prompt:")));
  absl::StatusOr<v1::DetokenizeRequest> detokenize =
      ParseDetokenizeRequest(R"({"tokens": [1, 2]})", Options());
  KVSERVE_ASSERT_OK(detokenize);
  EXPECT_THAT(detokenize->token_ids(), ::testing::ElementsAre(1, 2));
  EXPECT_THAT(ParseDetokenizeRequest(R"({"tokens": "x"})", Options()),
              StatusIs(_, StartsWith("tokens: must be a list")));
}

TEST(OpenAiResponseTest, CompletionBodyHasEveryChoiceFinishReasonAndUsage) {
  OpenAiMappingOptions options = Options();
  options.system_fingerprint = "fp_test";
  const OpenAiRequest request = Completion(R"({"prompt": ["a", "b"], "n": 2})", options);
  OpenAiResponseBuilder builder(request, "cmpl-1", "smol", 123);
  for (int prompt = 0; prompt < 2; ++prompt) {
    builder.Add(prompt, Delta(0, "x", v1::FINISH_REASON_LENGTH));
    v1::GenerateResponse last = Delta(1, "y", v1::FINISH_REASON_STOP_STRING);
    last.mutable_choices(0)->set_stop_string("END");
    last.mutable_usage()->set_prompt_tokens(3);
    last.mutable_usage()->set_completion_tokens(2);
    last.mutable_usage()->set_cached_prompt_tokens(1);
    builder.Add(prompt, last);
  }
  const Json body = Json::parse(builder.Body());
  EXPECT_EQ(body["id"], "cmpl-1");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "smol");
  EXPECT_EQ(body["created"], 123);
  EXPECT_EQ(body["system_fingerprint"], "fp_test");
  ASSERT_EQ(body["choices"].size(), 4u);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["stop_reason"], "END");
  EXPECT_EQ(body["choices"][3]["index"], 3);
  EXPECT_EQ(body["choices"][2]["text"], "x");
  EXPECT_TRUE(body["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(body["usage"]["prompt_tokens"], 6);
  EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  EXPECT_EQ(body["usage"]["total_tokens"], 10);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(OpenAiResponseTest, ChatChunksCarryTheRoleOnceThenDeltasAndAUsageChunk) {
  const OpenAiRequest request =
      Chat(R"({"messages": [], "stream": true, "stream_options": {"include_usage": true}})");
  OpenAiResponseBuilder builder(request, "chatcmpl-1", "smol", 1);
  std::vector<std::string> first =
      builder.Chunks(0, Delta(0, "Hel", v1::FINISH_REASON_UNSPECIFIED));
  v1::GenerateResponse last = Delta(0, "lo", v1::FINISH_REASON_STOP);
  last.mutable_choices(0)->set_stop_token_id(2);
  last.mutable_usage()->set_prompt_tokens(4);
  last.mutable_usage()->set_completion_tokens(2);
  std::vector<std::string> second = builder.Chunks(0, last);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  const Json a = Json::parse(first[0]);
  const Json b = Json::parse(second[0]);
  EXPECT_EQ(a["object"], "chat.completion.chunk");
  EXPECT_EQ(a["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(a["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(a["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(a.contains("usage") && a["usage"].is_null());
  EXPECT_FALSE(b["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(b["choices"][0]["finish_reason"], "stop");
  // Token 2 is the model's EOS here, not a requested stop token: null, as vLLM.
  EXPECT_TRUE(b["choices"][0].contains("stop_reason"));
  EXPECT_TRUE(b["choices"][0]["stop_reason"].is_null()) << b;
  const Json usage = Json::parse(builder.UsageChunk());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 6);
}

// stop_reason is the request's stop token that matched, null for the model's EOS.
TEST(OpenAiResponseTest, StopReasonIsTheRequestedStopTokenAndNullForEos) {
  const OpenAiRequest request = Completion(R"({"prompt": "a", "stop_token_ids": [7]})");
  for (const auto& [token, want] : {std::pair{7, Json(7)}, std::pair{2, Json()}}) {
    OpenAiResponseBuilder builder(request, "c", "m", 0);
    v1::GenerateResponse last = Delta(0, "x", v1::FINISH_REASON_STOP);
    last.mutable_choices(0)->set_stop_token_id(token);
    builder.Add(0, last);
    const Json body = Json::parse(builder.Body());
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(body["choices"][0]["stop_reason"], want) << token;
  }
}

v1::GenerateResponse WithLogprobs(const std::string& token, float logprob) {
  v1::GenerateResponse response = Delta(0, token, v1::FINISH_REASON_UNSPECIFIED);
  v1::PositionLogprobs* position = response.mutable_choices(0)->add_logprobs();
  position->mutable_chosen()->set_token_bytes(token);
  position->mutable_chosen()->set_logprob(logprob);
  v1::TokenLogprob* top = position->add_top();
  top->set_token_bytes("alt");
  top->set_logprob(-1.5f);
  return response;
}

TEST(OpenAiResponseTest, CompletionLogprobsUseTokensOffsetsAndTopMaps) {
  const OpenAiRequest request = Completion(R"({"prompt": "x", "logprobs": 1})");
  OpenAiResponseBuilder builder(request, "c", "m", 0);
  builder.Add(0, WithLogprobs("ab", -0.25f));
  builder.Add(0, WithLogprobs("\xe2\x82", -std::numeric_limits<float>::infinity()));
  const Json logprobs = Json::parse(builder.Body())["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"][0], "ab");
  EXPECT_EQ(logprobs["tokens"][1], "bytes:\\xe2\\x82");  // part of a character
  EXPECT_DOUBLE_EQ(logprobs["token_logprobs"][0].get<double>(), -0.25);
  EXPECT_DOUBLE_EQ(logprobs["token_logprobs"][1].get<double>(), -9999.0);  // -inf
  EXPECT_DOUBLE_EQ(logprobs["top_logprobs"][0]["alt"].get<double>(), -1.5);
  EXPECT_EQ(logprobs["text_offset"][0], 0);
  EXPECT_EQ(logprobs["text_offset"][1], 2);
}

TEST(OpenAiResponseTest, ChatLogprobsUseContentEntriesWithBytes) {
  const OpenAiRequest request = Chat(R"({"messages": [], "logprobs": true, "top_logprobs": 1})");
  OpenAiResponseBuilder builder(request, "c", "m", 0);
  builder.Add(0, WithLogprobs("A", -0.5f));
  const Json content = Json::parse(builder.Body())["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0]["token"], "A");
  EXPECT_EQ(content[0]["bytes"], Json::array({65}));
  EXPECT_EQ(content[0]["top_logprobs"][0]["token"], "alt");
  EXPECT_EQ(Json::parse(builder.Body())["choices"][0]["message"]["role"], "assistant");
}

TEST(OpenAiMappingTest, EchoAndPromptLogprobsAskForThePromptsLogprobs) {
  // echo with logprobs: the prompt's tokens with as many alternatives; max_tokens 0 is the
  // prompt alone (one token generated and dropped).
  OpenAiRequest scoring =
      Completion(R"({"prompt": "x", "echo": true, "logprobs": 2, "max_tokens": 0})");
  EXPECT_TRUE(scoring.echo);
  EXPECT_TRUE(scoring.prompt_only);
  EXPECT_EQ(scoring.prompt_logprobs, -1) << "not asked in vLLM's form";
  EXPECT_EQ(scoring.requests[0].sampling().max_tokens(), 1);
  EXPECT_EQ(scoring.requests[0].sampling().prompt_logprobs(), 2);
  // echo of a string without logprobs needs nothing; of token ids, their text.
  OpenAiRequest text = Completion(R"({"prompt": ["x", [5, 6]], "echo": true})");
  EXPECT_FALSE(text.requests[0].sampling().has_prompt_logprobs());
  EXPECT_EQ(text.requests[1].sampling().prompt_logprobs(), 0);
  // vLLM's prompt_logprobs, on both endpoints; a bad value is left for validation to refuse.
  OpenAiRequest vllm = Completion(R"({"prompt": "x", "prompt_logprobs": 4, "echo": true,
                                      "logprobs": 1})");
  EXPECT_EQ(vllm.prompt_logprobs, 4);
  EXPECT_EQ(vllm.requests[0].sampling().prompt_logprobs(), 4);
  EXPECT_EQ(
      Chat(R"({"messages": [], "prompt_logprobs": 0})").requests[0].sampling().prompt_logprobs(),
      0);
  EXPECT_EQ(Completion(R"({"prompt": "x", "prompt_logprobs": -1, "echo": true, "logprobs": 1})")
                .requests[0]
                .sampling()
                .prompt_logprobs(),
            -1);
}

// A worker's message with prompt logprobs for `tokens` (the first unscored), each scored
// -(i / 4) with one alternative "alt".
v1::GenerateResponse PromptLogprobs(const std::vector<std::string>& tokens) {
  v1::GenerateResponse response;
  for (size_t i = 0; i < tokens.size(); ++i) {
    v1::PositionLogprobs* position = response.add_prompt_logprobs();
    position->mutable_chosen()->set_token_id(static_cast<int32_t>(10 + i));
    position->mutable_chosen()->set_token_bytes(tokens[i]);
    if (i == 0) continue;
    position->mutable_chosen()->set_logprob(-0.25f * static_cast<float>(i));
    position->mutable_chosen()->set_rank(static_cast<int32_t>(i));
    v1::TokenLogprob* top = position->add_top();
    top->set_token_id(99);
    top->set_token_bytes("alt");
    top->set_logprob(-0.1f);
    top->set_rank(1);
  }
  return response;
}

TEST(OpenAiResponseTest, EchoPutsThePromptsTextAndLogprobsBeforeTheCompletions) {
  const OpenAiRequest request =
      Completion(R"({"prompt": [[10, 11, 12]], "echo": true, "logprobs": 1})");
  OpenAiResponseBuilder builder(request, "c", "m", 0);
  builder.Add(0, PromptLogprobs({"He", "llo", " w"}));
  v1::GenerateResponse last = WithLogprobs("orld", -0.5f);
  last.mutable_choices(0)->set_finish_reason(v1::FINISH_REASON_LENGTH);
  last.mutable_usage()->set_prompt_tokens(3);
  last.mutable_usage()->set_completion_tokens(1);
  builder.Add(0, last);
  const Json body = Json::parse(builder.Body());
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "Hello world");
  const Json& logprobs = choice["logprobs"];
  EXPECT_EQ(logprobs["tokens"], Json::array({"He", "llo", " w", "orld"}));
  EXPECT_TRUE(logprobs["token_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(logprobs["token_logprobs"][1].get<double>(), -0.25);
  EXPECT_DOUBLE_EQ(logprobs["token_logprobs"][2].get<double>(), -0.5);
  EXPECT_DOUBLE_EQ(logprobs["token_logprobs"][3].get<double>(), -0.5);
  EXPECT_TRUE(logprobs["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(logprobs["top_logprobs"][1]["alt"].get<double>(), -0.1);
  EXPECT_EQ(logprobs["text_offset"], Json::array({0, 2, 5, 7}));
  EXPECT_FALSE(choice.contains("prompt_logprobs"));
  EXPECT_EQ(body["usage"]["completion_tokens"], 1);
}

TEST(OpenAiResponseTest, EchoWithMaxTokensZeroReturnsThePromptAlone) {
  const OpenAiRequest request =
      Completion(R"({"prompt": "Hello w", "echo": true, "logprobs": 0, "max_tokens": 0})");
  OpenAiResponseBuilder builder(request, "c", "m", 0);
  builder.Add(0, PromptLogprobs({"He", "llo", " w"}));
  v1::GenerateResponse last = WithLogprobs("orld", -0.5f);
  last.mutable_choices(0)->set_finish_reason(v1::FINISH_REASON_STOP);
  last.mutable_usage()->set_prompt_tokens(3);
  last.mutable_usage()->set_completion_tokens(1);
  builder.Add(0, last);
  const Json body = Json::parse(builder.Body());
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "Hello w");
  EXPECT_EQ(choice["logprobs"]["tokens"].size(), 3u);
  EXPECT_TRUE(choice["logprobs"]["top_logprobs"][1].is_null()) << "logprobs 0: no alternatives";
  EXPECT_EQ(choice["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 0);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3);
}

TEST(OpenAiResponseTest, PromptLogprobsInVllmsFormatPerCompletionChoiceAndAtTheTopForChat) {
  const OpenAiRequest completion = Completion(R"({"prompt": "x", "prompt_logprobs": 1, "n": 2})");
  OpenAiResponseBuilder builder(completion, "c", "m", 0);
  builder.Add(0, PromptLogprobs({"a", "b"}));
  builder.Add(0, Delta(0, "y", v1::FINISH_REASON_LENGTH));
  builder.Add(0, Delta(1, "z", v1::FINISH_REASON_LENGTH));
  const Json body = Json::parse(builder.Body());
  for (int c = 0; c < 2; ++c) {
    const Json& prompt = body["choices"][c]["prompt_logprobs"];
    ASSERT_EQ(prompt.size(), 2u);
    EXPECT_TRUE(prompt[0].is_null());
    EXPECT_DOUBLE_EQ(prompt[1]["11"]["logprob"].get<double>(), -0.25);
    EXPECT_EQ(prompt[1]["11"]["rank"], 1);
    EXPECT_EQ(prompt[1]["11"]["decoded_token"], "b");
    EXPECT_EQ(prompt[1]["99"]["decoded_token"], "alt");
    EXPECT_EQ(body["choices"][c]["text"], c == 0 ? "y" : "z") << "no echo";
  }
  const OpenAiRequest chat = Chat(R"({"messages": [], "prompt_logprobs": 0})");
  OpenAiResponseBuilder chat_builder(chat, "c", "m", 0);
  chat_builder.Add(0, PromptLogprobs({"a", "b"}));
  chat_builder.Add(0, Delta(0, "y", v1::FINISH_REASON_LENGTH));
  const Json chat_body = Json::parse(chat_builder.Body());
  ASSERT_EQ(chat_body["prompt_logprobs"].size(), 2u);
  EXPECT_EQ(chat_body["prompt_logprobs"][1].size(), 1u) << "0 alternatives: the token only";
}

// "required" and a named function constrain the output (structured output): a list of calls
// valid for their functions, or the named function's arguments.
TEST(OpenAiMappingTest, RequiredAndNamedToolChoiceConstrainTheOutput) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": )"
      R"({"type": "object", "properties": {"x": {"type": "integer"}}}}},)"
      R"({"type": "function", "function": {"name": "g"}}])";
  OpenAiRequest required =
      Chat(absl::StrCat(R"({"messages": [], )", tools, R"(, "tool_choice": "required"})"));
  EXPECT_TRUE(required.tool_calls_required);
  EXPECT_TRUE(required.parse_tool_calls);
  const Json list = Json::parse(required.requests[0].sampling().structured_output().json_schema());
  EXPECT_EQ(list["type"], "array");
  EXPECT_EQ(list["minItems"], 1);
  EXPECT_EQ(list["maxItems"], 2);  // one call per tool at most: the list always ends
  ASSERT_EQ(list["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(list["items"]["anyOf"][0]["properties"]["name"]["const"], "f");
  EXPECT_EQ(list["items"]["anyOf"][0]["properties"]["parameters"]["properties"]["x"]["type"],
            "integer");
  EXPECT_EQ(list["items"]["anyOf"][1]["properties"]["parameters"]["type"], "object");
  const OpenAiRequest one = Chat(absl::StrCat(R"({"messages": [], )", tools,
                                              R"(, "tool_choice": "required", )"
                                              R"("parallel_tool_calls": false})"));
  EXPECT_EQ(Json::parse(one.requests[0].sampling().structured_output().json_schema())["maxItems"],
            1);

  const OpenAiRequest named =
      Chat(absl::StrCat(R"({"messages": [], )", tools,
                        R"(, "tool_choice": {"type": "function", "function": {"name": "f"}}})"));
  EXPECT_EQ(named.forced_tool, "f");
  EXPECT_EQ(Json::parse(named.requests[0].sampling().structured_output().json_schema()),
            Json::parse(R"({"type": "object", "properties": {"x": {"type": "integer"}}})"));

  OpenAiResponseBuilder named_builder(named, "chatcmpl-1", "m", 0);
  named_builder.Add(0, Delta(0, R"({"x": 3})", v1::FINISH_REASON_STOP));
  Json choice = Json::parse(named_builder.Body())["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"x": 3})");

  OpenAiResponseBuilder required_builder(required, "chatcmpl-2", "m", 0);
  required_builder.Add(0, Delta(0,
                                R"([{"name": "g", "parameters": {}}, )"
                                R"({"name": "f", "parameters": {"x": 1}}])",
                                v1::FINISH_REASON_STOP));
  choice = Json::parse(required_builder.Body())["choices"][0];
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "g");
  EXPECT_EQ(choice["message"]["tool_calls"][1]["function"]["arguments"], R"({"x": 1})");
}

}  // namespace
}  // namespace kvserve
