// ChatTemplate (minja): the default model's template and a Llama 3 style one give the bytes
// jinja2 gave (fixtures/tokenizer_chat_*.jsonl, written by make_tokenizer_fixtures.py; the
// hand-written renderer this replaced matched them too), the variables and functions templates
// use, tool call arguments, and the errors: no template, a parse error, raise_exception, a
// failing render, a bad tool. Real templates of many models: chat_template_golden_test.cc.
#include "tokenizer/chat_template.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"
#include "tests/tokenizer/tokenizer_test_fixtures.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<ChatMessage> Messages(const nlohmann::json& row) {
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& m : row["messages"]) {
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

void ExpectRendersLikeJinja(const ChatTemplate& chat, const std::vector<nlohmann::json>& rows) {
  ASSERT_FALSE(rows.empty());
  for (const nlohmann::json& row : rows) {
    const bool add_generation_prompt = row["add_generation_prompt"].get<bool>();
    absl::StatusOr<std::string> text = chat.Render(Messages(row), add_generation_prompt);
    KVSERVE_ASSERT_OK(text) << row.dump();
    EXPECT_EQ(*text, row["text"].get<std::string>()) << row.dump();
  }
}

// A template of `source` with no BOS / EOS text; a parse error throws (and fails the test).
ChatTemplate Parse(std::string_view source) {
  return ChatTemplate::FromJinja(source, "", "").value();
}

TEST(ChatTemplateTest, DefaultModelTemplateRendersTheSameBytesAsJinja2) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<ChatTemplate> chat =
      ChatTemplate::FromJinja(tokenizer->chat_template(), "<|im_start|>", "<|im_end|>");
  KVSERVE_ASSERT_OK(chat);
  ExpectRendersLikeJinja(*chat, testing::ReadJsonLines("tokenizer_chat_smollm2.jsonl"));
}

TEST(ChatTemplateTest, Llama3TemplateRendersTheSameBytesAsJinja2) {
  std::vector<nlohmann::json> rows = testing::ReadJsonLines("tokenizer_chat_llama3.jsonl");
  ASSERT_GE(rows.size(), 2u);
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(
      rows[0]["template"].get<std::string>(), "<|begin_of_text|>", "<|eot_id|>");
  KVSERVE_ASSERT_OK(chat);
  rows.erase(rows.begin());
  ExpectRendersLikeJinja(*chat, rows);
}

TEST(ChatTemplateTest, TemplatesSeeTheSpecialTokensAndTheGenerationFlag) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% else %}{{ eos_token }}{% endif %}",
      "<s>", "</s>");
  KVSERVE_ASSERT_OK(chat);
  EXPECT_EQ(*chat->Render({{"user", "hi"}}, true), "<s>[user]hi[assistant]");
  EXPECT_EQ(*chat->Render({{"user", "hi"}, {"assistant", "yo"}}, false),
            "<s>[user]hi[assistant]yo</s>");
}

TEST(ChatTemplateTest, StrftimeNowFormatsTheClocksLocalTime) {
  absl::StatusOr<ChatTemplate> chat =
      ChatTemplate::FromJinja("{{ strftime_now('%d %b %Y %H:%M') }}", "", "",
                              [] { return absl::CivilSecond(2024, 7, 26, 9, 5, 0); });
  KVSERVE_ASSERT_OK(chat);
  EXPECT_EQ(*chat->Render({}, false), "26 Jul 2024 09:05");
  // Without a clock: today, as the local time zone has it.
  const std::string year = absl::FormatTime("%Y", absl::Now(), absl::LocalTimeZone());
  EXPECT_EQ(*Parse("{{ strftime_now('%Y') }}").Render({}, false), year);
}

TEST(ChatTemplateTest, TojsonAndTrimWriteWhatPythonWrites) {
  const ChatTemplate chat = Parse(
      "{{ tools[0] | tojson }}|{{ tools[0] | tojson(indent=2) }}|{{ messages[0].content | trim }}|"
      "{{ {'e': [], 'n': none, 'f': 1.5, 'b': true} | tojson }}");
  absl::StatusOr<std::string> text = chat.Render(
      {{"user", "\u3000 spaced é \n"}}, false,
      {R"({"type": "function", "function": {"name": "f", "parameters": {"required": []}}})"});
  KVSERVE_ASSERT_OK(text);
  EXPECT_EQ(*text,
            R"({"type": "function", "function": {"name": "f", "parameters": {"required": []}}}|{
  "type": "function",
  "function": {
    "name": "f",
    "parameters": {
      "required": []
    }
  }
}|spaced é|{"e": [], "n": null, "f": 1.5, "b": true})");
}

TEST(ChatTemplateTest, ToolsAreUndefinedWhenNoneAreGiven) {
  const ChatTemplate chat =
      Parse("{% if tools is defined %}{{ tools | length }}{% else %}none{% endif %}");
  EXPECT_EQ(*chat.Render({{"user", "hi"}}, false), "none");
  EXPECT_EQ(*chat.Render({{"user", "hi"}}, false, {R"({"type": "function"})"}), "1");
}

TEST(ChatTemplateTest, ToolCallFieldsReachTheTemplate) {
  const ChatTemplate chat = Parse(
      "{% for m in messages %}{{ m.role }}:{{ m.content is none }}"
      "{% for c in m.tool_calls %}|{{ c.id }} {{ c.type }} {{ c.function.name }} "
      "{{ c.function.arguments }}{% endfor %}"
      "{% if m.tool_call_id is defined %}|{{ m.tool_call_id }} {{ m.name }}{% endif %};"
      "{% endfor %}");
  ChatMessage call{.role = "assistant", .content = std::nullopt};
  call.tool_calls.push_back({.id = "c1", .name = "f", .arguments = R"({"x": 1})"});
  const ChatMessage result{.role = "tool", .content = "42", .tool_call_id = "c1", .name = "f"};
  EXPECT_EQ(*chat.Render({call, result}, false),
            R"(assistant:True|c1 function f {"x": 1};tool:False|c1 f;)");
  EXPECT_FALSE(chat.object_arguments());  // it prints the text
}

TEST(ChatTemplateTest, ArgumentsAreObjectsForTemplatesThatApplyTojson) {
  // Llama 3.1 style: `arguments | tojson` double-encodes text, so it gets the object.
  const ChatTemplate chat = Parse(
      "{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments | tojson }}"
      "{% endfor %}{% endfor %}");
  EXPECT_TRUE(chat.object_arguments());
  ChatMessage call{.role = "assistant", .content = std::nullopt};
  call.tool_calls.push_back({.id = "", .name = "f", .arguments = R"({"b": 1, "a": "é"})"});
  EXPECT_EQ(*chat.Render({call}, false), R"({"b": 1, "a": "é"})");
  // Text that is not a JSON object stays text.
  call.tool_calls[0].arguments = "not json";
  EXPECT_EQ(*chat.Render({call}, false), R"("not json")");
}

TEST(ChatTemplateTest, MissingTemplateIsRefused) {
  EXPECT_THAT(ChatTemplate::FromJinja("", "", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "the model has no chat template"));
}

TEST(ChatTemplateTest, ParseErrorIsRefusedWithMinjasMessage) {
  EXPECT_THAT(ChatTemplate::FromJinja("{% for m in messages %}{{ m.content }}", "", ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(StartsWith("chat template does not parse: "),
                             HasSubstr("Unterminated for at row 1, column 1"))));
  EXPECT_THAT(
      ChatTemplate::FromJinja("{{ 1 + }}", "", ""),
      StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("chat template does not parse: ")));
}

TEST(ChatTemplateTest, RaiseExceptionRefusesWithTheTemplatesMessage) {
  const ChatTemplate chat = Parse(
      "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}ok");
  EXPECT_EQ(*chat.Render({{"user", "hi"}}, true), "ok");
  EXPECT_THAT(chat.Render({{"system", "be brief"}, {"user", "hi"}}, true),
              StatusIs(absl::StatusCode::kInvalidArgument, "System role not supported"));
}

TEST(ChatTemplateTest, RenderErrorsAreInvalidArgument) {
  // Python refuses str + None; so does the renderer (no "None" text in the prompt).
  EXPECT_THAT(Parse("{{ 'a' + messages[0].content }}").Render({{"assistant", std::nullopt}}, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("messages[0]: chat template failed: ")));
  // No message is at fault when the template fails without any.
  EXPECT_THAT(Parse("{{ messages.nope() }}").Render({{"user", "hi"}}, false),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("chat template failed: ")));
  EXPECT_THAT(Parse("x").Render({{"user", "hi"}}, false, {"[1, 2]"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "tools[0]: not a JSON object"));
}

// A failure deep in a real template is one short line naming the message at fault, not the
// template source quoted once per enclosing block.
TEST(ChatTemplateTest, RenderErrorsAreOneLineNamingTheMessage) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(tokenizer->chat_template(), "", "");
  KVSERVE_ASSERT_OK(chat);
  ChatMessage call{.role = "assistant", .content = std::nullopt};
  call.tool_calls.push_back({.id = "c1", .name = "f", .arguments = "{}"});
  const absl::StatusOr<std::string> text =
      chat->Render({{"user", "hi"}, call, {"tool", "42"}}, true);
  ASSERT_THAT(text, StatusIs(absl::StatusCode::kInvalidArgument,
                             StartsWith("messages[1]: chat template failed: ")));
  EXPECT_EQ(text.status().message().find('\n'), absl::string_view::npos) << text.status();
  EXPECT_LT(text.status().message().size(), 400u) << text.status();
}

// The default model's template ignores tools and tool calls: with the fallback the model sees
// the tools in the system prompt and its calls as text, and content none renders.
TEST(ChatTemplateTest, ToolFallbackShowsToolsAndCallsToATemplateThatIgnoresThem) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(tokenizer->chat_template(), "", "");
  KVSERVE_ASSERT_OK(chat);
  EXPECT_FALSE(chat->renders_tools());
  EXPECT_FALSE(chat->renders_tool_calls());
  ChatMessage call{.role = "assistant", .content = std::nullopt};
  call.tool_calls.push_back(
      {.id = "c1", .name = "get_weather", .arguments = R"({"city": "Paris"})"});
  const std::vector<ChatMessage> messages = {{"user", "Weather in Paris?"}, call, {"tool", "18 C"}};
  const std::string tool =
      R"({"type": "function", "function": {"name": "get_weather", "parameters": {}}})";
  // Without the fallback: as transformers, the tools are dropped (and here content none fails).
  absl::StatusOr<std::string> exact = chat->Render({messages[0]}, true, {tool});
  KVSERVE_ASSERT_OK(exact);
  EXPECT_EQ(exact->find("get_weather"), std::string::npos);
  absl::StatusOr<std::string> text = chat->Render(messages, true, {tool}, /*tool_fallback=*/true);
  KVSERVE_ASSERT_OK(text);
  EXPECT_EQ(text->rfind("<|im_start|>system\n", 0), 0u) << *text;
  EXPECT_NE(text->find("<tools>\n" + tool + "\n</tools>"), std::string::npos) << *text;
  EXPECT_NE(text->find("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>"),
            std::string::npos)
      << *text;
  EXPECT_NE(text->find("<|im_start|>tool\n18 C<|im_end|>"), std::string::npos) << *text;
  // A client's system message keeps its text, the tools after it; indices stay the client's.
  absl::StatusOr<std::string> with_system =
      chat->Render({{"system", "Be brief."}, messages[0]}, true, {tool}, true);
  KVSERVE_ASSERT_OK(with_system);
  EXPECT_EQ(with_system->rfind("<|im_start|>system\nBe brief.\n\nYou have access", 0), 0u)
      << *with_system;
  EXPECT_THAT(chat->Render({messages[0], {"assistant", std::nullopt}}, true, {tool}, true),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("messages[1]: chat template failed: ")));
}

// A template that renders tools itself (Qwen 2.5's) is left as it is.
TEST(ChatTemplateTest, ToolFallbackLeavesATemplateThatRendersTools) {
  std::ifstream file(std::string(KVSERVE_SOURCE_DIR) +
                     "/tests/tokenizer/testdata/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  std::stringstream source;
  source << file.rdbuf();
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(source.str(), "", "");
  KVSERVE_ASSERT_OK(chat);
  EXPECT_TRUE(chat->renders_tools());
  EXPECT_TRUE(chat->renders_tool_calls());
  const std::string tool = R"({"type": "function", "function": {"name": "get_weather"}})";
  EXPECT_EQ(*chat->Render({{"user", "hi"}}, true, {tool}, true),
            *chat->Render({{"user", "hi"}}, true, {tool}, false));
}

TEST(ChatTemplateTest, CopiesRenderConcurrently) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromJinja(tokenizer->chat_template(), "", "");
  KVSERVE_ASSERT_OK(chat);
  const std::string want = *chat->Render({{"user", "Hi"}}, true);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t, copy = *chat] {
      for (int i = 0; i < 200; ++i) mismatches[t] += *copy.Render({{"user", "Hi"}}, true) != want;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(std::count(mismatches.begin(), mismatches.end(), 0), 4);
}

TEST(ChatTemplateFileTest, ReadsAParsingTemplateAndNamesTheFlagOtherwise) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/good.jinja";
  const std::string bad = dir + "/bad.jinja";
  const std::string empty = dir + "/empty.jinja";
  std::ofstream(good) << "{% for m in messages %}{{ m.content }}{% endfor %}";
  std::ofstream(bad) << "{% for m in messages %}";
  std::ofstream(empty) << "";
  absl::StatusOr<std::string> read = ReadChatTemplateFile(good);
  KVSERVE_ASSERT_OK(read);
  EXPECT_EQ(*read, "{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_THAT(ReadChatTemplateFile(bad),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("--chat_template: '" + bad + "': chat template does not parse")));
  EXPECT_THAT(ReadChatTemplateFile(empty),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is empty")));
  EXPECT_THAT(
      ReadChatTemplateFile(dir + "/missing.jinja"),
      StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("--chat_template: cannot read")));
}

// The rendered prompt's special-token text becomes single ids when encoded.
TEST(ChatTemplateTest, RenderedPromptEncodesMarkersAsSpecialIds) {
  std::unique_ptr<Tokenizer> tokenizer = testing::DefaultModelTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::string prompt =
      *Parse(tokenizer->chat_template()).Render({{"system", "S"}, {"user", "Hi"}}, true);
  const std::vector<int32_t> ids = tokenizer->Encode(prompt, false);
  const int32_t im_start = tokenizer->PieceToId("<|im_start|>");
  const int32_t im_end = tokenizer->PieceToId("<|im_end|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 2);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(tokenizer->Decode(ids), prompt);
}

}  // namespace
}  // namespace kvserve
