// Tool calls in OpenAI chat responses: parsed calls become message.tool_calls with finish_reason
// "tool_calls"; streamed, each call's deltas come while it is written (its head once its name is
// whole, then its arguments in pieces) and join to the calls of the body, in every format and
// for tool_choice "required" and a named function; output that is no call after all streams as
// the content the body gives, with the same finish_reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "http/openai_mapping.h"
#include "http/openai_response.h"
#include "tests/http/openai_test_util.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using Json = nlohmann::json;
using ::kvserve::testing::Chat;
using ::kvserve::testing::Delta;
using ::kvserve::testing::Options;
using ::testing::StartsWith;

constexpr char kResponseId[] = "chatcmpl-7";  // call ids derive from it

// A chat request with tools f and g whose model writes calls in `format`; `extra` adds fields
// (", \"tool_choice\": ...").
OpenAiRequest ToolChat(ToolCallFormat format, bool stream, const std::string& extra = "") {
  OpenAiMappingOptions options = Options();
  options.tool_call_format = format;
  return Chat(absl::StrCat(R"({"messages": [], "tools": [)",
                           R"({"type": "function", "function": {"name": "f"}}, )",
                           R"({"type": "function", "function": {"name": "g"}}], "stream": )",
                           stream ? "true" : "false", extra, "}"),
              options);
}

// The one choice of the body for output `text`.
Json BodyChoice(const OpenAiRequest& request, const std::string& text, v1::FinishReason finish) {
  OpenAiResponseBuilder builder(request, kResponseId, "m", 0);
  builder.Add(0, Delta(0, text, finish));
  return Json::parse(builder.Body())["choices"][0];
}

// What a client puts together from a stream, as the openai SDK does (arguments joined per index).
struct Streamed {
  std::string content;
  Json calls = Json::array();        // [{id, type, function: {name, arguments}}] by index
  std::vector<int> argument_pieces;  // by index
  int first_head_message = -1;       // the engine message whose chunks held the first head
  int messages = 0;
  int roles = 0;
  Json finish_reason;
};

// Streams `text` to a builder as engine messages of 1 to 4 bytes (as tokens come), the last
// one finishing with `finish`.
Streamed Stream(const OpenAiRequest& request, const std::string& text, v1::FinishReason finish,
                std::mt19937* rng) {
  OpenAiResponseBuilder builder(request, kResponseId, "m", 0);
  Streamed out;
  for (size_t at = 0; at < text.size(); ++out.messages) {
    const size_t length = 1 + (*rng)() % 4;
    const bool last = at + length >= text.size();
    for (const std::string& chunk : builder.Chunks(
             0, Delta(0, text.substr(at, length), last ? finish : v1::FINISH_REASON_UNSPECIFIED))) {
      const Json choice = Json::parse(chunk)["choices"][0];
      const Json& delta = choice["delta"];
      if (delta.contains("role")) ++out.roles;
      if (delta.contains("content")) out.content += delta["content"].get<std::string>();
      for (const Json& call : delta.value("tool_calls", Json::array())) {
        const size_t index = call["index"].get<size_t>();
        if (call.contains("id")) {
          EXPECT_EQ(index, out.calls.size()) << "calls begin in order, once";
          EXPECT_EQ(call["function"]["arguments"], "");
          out.calls.push_back(
              {{"id", call["id"]},
               {"type", call["type"]},
               {"function", {{"name", call["function"]["name"]}, {"arguments", ""}}}});
          out.argument_pieces.push_back(0);
          if (out.first_head_message < 0) out.first_head_message = out.messages;
          continue;
        }
        EXPECT_LT(index, out.calls.size()) << "arguments before their call's head";
        if (index >= out.calls.size()) continue;
        std::string& arguments = out.calls[index]["function"]["arguments"].get_ref<std::string&>();
        arguments += call["function"]["arguments"].get<std::string>();
        ++out.argument_pieces[index];
      }
      if (!choice["finish_reason"].is_null()) out.finish_reason = choice["finish_reason"];
    }
    at += length;
  }
  return out;
}

std::mt19937 SeededRng() {
  const unsigned seed = std::random_device()();
  std::printf("seed %u\n", seed);
  return std::mt19937(seed);
}

TEST(OpenAiToolCallsTest, CallsBecomeMessageToolCallsWithFinishReasonToolCalls) {
  const std::string two_calls =
      "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
  const OpenAiRequest request = ToolChat(ToolCallFormat::kHermes, /*stream=*/false);
  const Json choice = BodyChoice(request, two_calls, v1::FINISH_REASON_STOP);
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  const Json& calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "f");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"x": 1})");  // as the model wrote it
  EXPECT_EQ(calls[1]["function"]["name"], "g");
  EXPECT_THAT(calls[0]["id"].get<std::string>(), StartsWith("call_"));
  EXPECT_NE(calls[0]["id"], calls[1]["id"]);

  // parallel_tool_calls false: the first call only. Text that is no call stays content.
  const OpenAiRequest first_only =
      ToolChat(ToolCallFormat::kHermes, false, R"(, "parallel_tool_calls": false)");
  EXPECT_EQ(
      BodyChoice(first_only, two_calls, v1::FINISH_REASON_STOP)["message"]["tool_calls"].size(),
      1u);
  const Json plain = BodyChoice(request, "Just text <tool", v1::FINISH_REASON_STOP);
  EXPECT_EQ(plain["finish_reason"], "stop");
  EXPECT_EQ(plain["message"]["content"], "Just text <tool");
  EXPECT_FALSE(plain["message"].contains("tool_calls"));
}

struct CallsCase {
  ToolCallFormat format;
  std::string extra;  // tool_choice
  std::string text;
};

// Outputs with calls (several, unicode, escapes, arguments as JSON text) in every form.
std::vector<CallsCase> CallsCases() {
  return {
      {ToolCallFormat::kHermes, "",
       "Checking.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"city\": \"Z\xC3\xBCrich "
       "\\u00e9 \\ud83d\\ude00 \\\"q\\\" }\", \"n\": [1, 2.5]}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"g\", \"arguments\": \"{\\\"x\\\": \\\"\\\\u00e9\\u00e9\\ud83d\\ude00\\\"}\"}\n"
       "</tool_call>\nDone."},
      {ToolCallFormat::kLlama3Json, "",
       "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"s\": \"a;b \xF0\x9F\x98\x80\"}}; "
       "{\"name\": \"g\", \"parameters\": {}}"},
      {ToolCallFormat::kMistral, "",
       "Sure.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"q\": \"x\\n\\u00e9\"}}, "
       "{\"name\": \"g\", \"arguments\": {\"y\": [true, null]}}]"},
      {ToolCallFormat::kHermes, R"(, "tool_choice": "required")",
       "[{\"name\": \"g\", \"parameters\": {\"a\": \"b\"}}, {\"name\": \"f\", \"parameters\": "
       "{\"x\": 1, \"s\": \"\\u20ac\xE2\x82\xAC\"}}]"},
      {ToolCallFormat::kHermes,
       R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})",
       "{\"x\": 3, \"s\": \"caf\xC3\xA9 }\"}"},
  };
}

TEST(OpenAiToolCallsTest, StreamedCallsComeWhileWrittenAndJoinToTheBodysCalls) {
  std::mt19937 rng = SeededRng();
  for (const CallsCase& c : CallsCases()) {
    SCOPED_TRACE(c.text);
    const Json want =
        BodyChoice(ToolChat(c.format, false, c.extra), c.text, v1::FINISH_REASON_STOP);
    ASSERT_EQ(want["finish_reason"], "tool_calls");
    const OpenAiRequest request = ToolChat(c.format, /*stream=*/true, c.extra);
    for (int round = 0; round < 20; ++round) {
      const Streamed streamed = Stream(request, c.text, v1::FINISH_REASON_STOP, &rng);
      EXPECT_EQ(streamed.calls, want["message"]["tool_calls"]);
      EXPECT_EQ(streamed.content, want["message"]["content"].is_null()
                                      ? ""
                                      : want["message"]["content"].get<std::string>());
      EXPECT_EQ(streamed.finish_reason, "tool_calls");
      EXPECT_EQ(streamed.roles, 1);
      // While written: the first head long before the end, its arguments in several pieces.
      EXPECT_GE(streamed.first_head_message, 0);
      EXPECT_LT(streamed.first_head_message, streamed.messages / 2);
      ASSERT_FALSE(streamed.argument_pieces.empty());
      EXPECT_GT(streamed.argument_pieces[0], 1);
    }
  }
}

TEST(OpenAiToolCallsTest, StreamedWithoutParallelCallsGivesTheFirstCallOnly) {
  std::mt19937 rng = SeededRng();
  const CallsCase c = CallsCases()[0];
  const std::string extra = R"(, "parallel_tool_calls": false)";
  const Json want = BodyChoice(ToolChat(c.format, false, extra), c.text, v1::FINISH_REASON_STOP);
  ASSERT_EQ(want["message"]["tool_calls"].size(), 1u);
  const Streamed streamed =
      Stream(ToolChat(c.format, true, extra), c.text, v1::FINISH_REASON_STOP, &rng);
  EXPECT_EQ(streamed.calls, want["message"]["tool_calls"]);
  EXPECT_EQ(streamed.finish_reason, "tool_calls");
}

// Output that is no call after all (the marker never completes, JSON that breaks after a call's
// name went out, a call cut off by max_tokens, text in a format that calls would begin
// otherwise): streamed, the content joins to the body's content and the finish_reason is the
// body's.
TEST(OpenAiToolCallsTest, NoCallAfterAllStreamsTheBodysContent) {
  std::mt19937 rng = SeededRng();
  const std::string named = R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})";
  const std::vector<std::tuple<ToolCallFormat, std::string, std::string, v1::FinishReason>> cases =
      {
          {ToolCallFormat::kHermes, "", "Hello <toolbox> done <tool_ca", v1::FINISH_REASON_STOP},
          {ToolCallFormat::kHermes, "",
           "Hi\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1,, }}</tool_call>",
           v1::FINISH_REASON_STOP},
          {ToolCallFormat::kHermes, "",
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"long", v1::FINISH_REASON_LENGTH},
          {ToolCallFormat::kLlama3Json, "", "The answer is {\"name\": 1}", v1::FINISH_REASON_STOP},
          {ToolCallFormat::kMistral, "", "Sure. [TOOL_CALLS] not json", v1::FINISH_REASON_STOP},
          {ToolCallFormat::kHermes, R"(, "tool_choice": "required")", "[{\"name\": \"f\", ",
           v1::FINISH_REASON_LENGTH},
          {ToolCallFormat::kHermes, named, "{\"x\": ", v1::FINISH_REASON_LENGTH},
      };
  for (const auto& [format, extra, text, finish] : cases) {
    SCOPED_TRACE(text);
    const Json want = BodyChoice(ToolChat(format, false, extra), text, finish);
    EXPECT_FALSE(want["message"].contains("tool_calls"));
    EXPECT_EQ(want["message"]["content"], text);
    for (int round = 0; round < 10; ++round) {
      const Streamed streamed = Stream(ToolChat(format, true, extra), text, finish, &rng);
      EXPECT_EQ(streamed.content, text);
      EXPECT_EQ(streamed.finish_reason, want["finish_reason"]);
    }
  }
}

}  // namespace
}  // namespace kvserve
