// ToolCallStreamParser: for outputs in each format (one call, several, content beside them,
// unicode and escapes in arguments, arguments as JSON text, arguments before the name, outputs
// that are not calls), fed whole, a byte at a time, split at every byte and in random pieces, the
// deltas join to the calls of the one-shot parse and the result is the same. Also: arguments go
// out while they are written and never past their end, and after a failure nothing more comes.
#include "tokenizer/tool_call_stream_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/unicode.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::FieldsAre;
using ::testing::IsEmpty;

enum class Kind { kHermes, kLlama3Json, kMistral, kCallList, kArguments };

ToolCallStreamParser MakeParser(Kind kind) {
  switch (kind) {
    case Kind::kHermes:
      return ToolCallStreamParser(ToolCallFormat::kHermes);
    case Kind::kLlama3Json:
      return ToolCallStreamParser(ToolCallFormat::kLlama3Json);
    case Kind::kMistral:
      return ToolCallStreamParser(ToolCallFormat::kMistral);
    case Kind::kCallList:
      return ToolCallStreamParser::CallList();
    case Kind::kArguments:
      return ToolCallStreamParser::Arguments("forced");
  }
  return ToolCallStreamParser(ToolCallFormat::kNone);
}

struct Case {
  Kind kind;
  std::string text;
};

// Outputs with calls and without, in every form the parser takes.
std::vector<Case> Cases() {
  return {
      {Kind::kHermes,
       "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
       "</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>"},
      // Unicode, escapes, braces and the closing tag inside strings.
      {Kind::kHermes,
       "<tool_call>{\"name\": \"say\", \"arguments\": {\"text\": \"caf\xC3\xA9 \xF0\x9F\x98\x80 "
       "\\u00e9\\ud83d\\ude00 \\\"q\\\" \\\\ }{ ][ </tool_call>\", \"n\": [1, -2.5e3, true, null]}}"
       "</tool_call>"},
      // Arguments as JSON text, before the name; "parameters"; no arguments; a call cut off
      // before its closing tag.
      {Kind::kHermes,
       "<tool_call>{\"arguments\": \"{\\\"x\\\": \\\"\\\\u00e9\\u00e9\\ud83d\\ude00\\\"}\", "
       "\"name\": \"f\"}"
       "</tool_call> between <tool_call>{\"name\": \"g\", \"parameters\": {\"y\": 2}}"
       "</tool_call><tool_call>{\"id\": 7, \"name\": \"h\"}</tool_"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": null}</tool_call> after"},
      {Kind::kHermes, "  <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}} </tool_call>  "},
      // Not calls.
      {Kind::kHermes, "no calls here <tool_ca"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>"},
      {Kind::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 01}}</tool_call>"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\", \"name\": \"g\"}</tool_call>"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\"} trailing</tool_call>"},
      {Kind::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\xC3\"}}</tool_call>"},
      {Kind::kHermes,
       "<tool_call>{\"name\": \"ok\"}</tool_call><tool_call>{\"name\": \"f\", "
       "\"arguments\": {\"a\": 1"},
      {Kind::kLlama3Json,
       "{\"name\": \"weather\", \"parameters\": {\"city\": \"Paris; France \\u00e9\"}}"},
      {Kind::kLlama3Json,
       " <|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
       "{\"n\": 2, \"s\": \"x;y\"}}"},
      {Kind::kLlama3Json, "The answer is {\"name\": 1}"},
      {Kind::kLlama3Json, "{\"name\": \"a\", \"parameters\": {}};"},
      {Kind::kLlama3Json, "<|python_tag|>"},
      {Kind::kMistral,
       "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\\n\\u00e9\"}}, "
       "{\"name\": \"b\", \"arguments\": {}}]"},
      {Kind::kMistral, "[TOOL_CALLS] {\"name\": \"a\", \"arguments\": {\"q\": [1, {\"r\": 2}]}}"},
      {Kind::kMistral, "[TOOL_CALLS] not json"},
      {Kind::kMistral, "[TOOL_CALLS][]"},
      {Kind::kMistral, "[TOOL_CALLS][{\"name\": \"a\"}, 3]"},
      {Kind::kMistral, "[TOOL_CALLS][{\"name\": \"a\"}] and more"},
      {Kind::kCallList,
       "[{\"name\": \"g\", \"parameters\": {}}, {\"name\": \"f\", \"parameters\": {\"x\": 1, "
       "\"s\": \"\xE2\x82\xAC\\u20ac\"}}]"},
      {Kind::kCallList, "[{\"name\": \"g\", \"parameters\": {\"x\": "},
      {Kind::kArguments, " {\"x\": 3, \"nested\": {\"s\": \"}\\\"\"}} "},
      {Kind::kArguments, "{\"x\": 3"},
      {Kind::kArguments, "[3]"},
      // Keys named like a call's inside its arguments are arguments.
      {Kind::kHermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"name\": \"inner\", \"arguments\": [1], "
       "\"parameters\": null}}</tool_call>"},
  };
}

// What the deltas give: each call's name and joined arguments, checking on the way that a call's
// first delta has its name and only that one, that calls come in order, and that each piece is
// whole UTF-8.
struct Joined {
  std::vector<ChatToolCall> calls;
  void Add(const std::vector<ToolCallDelta>& deltas) {
    for (const ToolCallDelta& delta : deltas) {
      ASSERT_LE(delta.index, static_cast<int>(calls.size()));
      if (delta.index == static_cast<int>(calls.size())) {
        ASSERT_FALSE(delta.name.empty()) << "call " << delta.index << " began without its name";
        calls.push_back(ChatToolCall{.id = "", .name = delta.name, .arguments = ""});
      } else {
        ASSERT_TRUE(delta.name.empty()) << "a second name for call " << delta.index;
      }
      std::string valid;
      AppendValidUtf8(delta.arguments, /*final=*/true, &valid);
      EXPECT_EQ(valid, delta.arguments) << "a piece that splits a character";
      calls[delta.index].arguments += delta.arguments;
    }
  }
};

// "name(arguments)" of each call, one a line: comparable, and readable when it differs.
std::string Show(const std::vector<ChatToolCall>& calls) {
  std::string out;
  for (const ChatToolCall& call : calls) out += call.name + "(" + call.arguments + ")\n";
  return out;
}

// Feeds `pieces` and checks the deltas and the result against the one-shot parse.
void ExpectSameAsWhole(Kind kind, const std::string& text, const std::vector<std::string>& pieces) {
  const ParsedToolCalls whole = MakeParser(kind).Parse(text);
  ToolCallStreamParser parser = MakeParser(kind);
  Joined joined;
  for (const std::string& piece : pieces) joined.Add(parser.Append(piece));
  joined.Add(parser.Finish());
  const ParsedToolCalls result = parser.Result();
  EXPECT_EQ(result.content, whole.content);
  EXPECT_EQ(Show(result.calls), Show(whole.calls));
  EXPECT_EQ(parser.content_only(), whole.calls.empty());
  if (!whole.calls.empty()) {
    EXPECT_EQ(Show(joined.calls), Show(whole.calls));
  }
}

TEST(ToolCallStreamParserTest, EverySplitGivesTheOneShotCalls) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.text);
    ExpectSameAsWhole(c.kind, c.text, {c.text});
    std::vector<std::string> bytes;
    for (char b : c.text) bytes.push_back(std::string(1, b));
    ExpectSameAsWhole(c.kind, c.text, bytes);
    for (size_t at = 0; at <= c.text.size(); ++at) {
      ExpectSameAsWhole(c.kind, c.text, {c.text.substr(0, at), c.text.substr(at)});
    }
  }
}

TEST(ToolCallStreamParserTest, RandomPiecesGiveTheOneShotCalls) {
  const unsigned seed = std::random_device()();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.text);
    for (int round = 0; round < 50; ++round) {
      std::vector<std::string> pieces;
      for (size_t at = 0; at < c.text.size();) {
        const size_t length = rng() % 8;  // empty pieces too
        pieces.push_back(c.text.substr(at, length));
        at += length;
      }
      ExpectSameAsWhole(c.kind, c.text, pieces);
    }
  }
}

TEST(ToolCallStreamParserTest, OneShotCallsAreWhatTheModelWrote) {
  std::vector<ParsedToolCalls> parsed;
  for (const Case& c : Cases()) parsed.push_back(MakeParser(c.kind).Parse(c.text));
  EXPECT_EQ(parsed[0].content, "Let me look.");
  EXPECT_THAT(parsed[0].calls, ElementsAre(FieldsAre("", "weather", R"({"city": "Paris"})"),
                                           FieldsAre("", "time", "{}")));
  EXPECT_THAT(parsed[1].calls,
              ElementsAre(FieldsAre("", "say",
                                    "{\"text\": \"caf\xC3\xA9 \xF0\x9F\x98\x80 \\u00e9\\ud83d"
                                    "\\ude00 \\\"q\\\" \\\\ }{ ][ </tool_call>\", \"n\": [1, "
                                    "-2.5e3, true, null]}")));
  EXPECT_EQ(parsed[2].content, "between");
  EXPECT_THAT(parsed[2].calls,
              ElementsAre(FieldsAre("", "f", "{\"x\": \"\\u00e9\xC3\xA9\xF0\x9F\x98\x80\"}"),
                          FieldsAre("", "g", R"({"y": 2})"), FieldsAre("", "h", "{}")));
  EXPECT_EQ(parsed[3].content, "after");
  EXPECT_THAT(parsed[3].calls, ElementsAre(FieldsAre("", "f", "{}")));
  EXPECT_EQ(parsed[4].content, "");
  for (size_t k = 5; k <= 14; ++k) {
    EXPECT_EQ(parsed[k].content, Cases()[k].text);
    EXPECT_THAT(parsed[k].calls, IsEmpty());
  }
  EXPECT_THAT(parsed[15].calls,
              ElementsAre(FieldsAre("", "weather", R"({"city": "Paris; France \u00e9"})")));
  EXPECT_THAT(parsed[16].calls,
              ElementsAre(FieldsAre("", "a", "{}"), FieldsAre("", "b", R"({"n": 2, "s": "x;y"})")));
  for (size_t k = 17; k <= 19; ++k) EXPECT_THAT(parsed[k].calls, IsEmpty());
  EXPECT_EQ(parsed[20].content, "Sure.");
  EXPECT_THAT(parsed[20].calls,
              ElementsAre(FieldsAre("", "a", R"({"q": "x\n\u00e9"})"), FieldsAre("", "b", "{}")));
  EXPECT_THAT(parsed[21].calls, ElementsAre(FieldsAre("", "a", R"({"q": [1, {"r": 2}]})")));
  for (size_t k = 22; k <= 25; ++k) EXPECT_THAT(parsed[k].calls, IsEmpty());
  EXPECT_THAT(parsed[26].calls,
              ElementsAre(FieldsAre("", "g", "{}"),
                          FieldsAre("", "f", "{\"x\": 1, \"s\": \"\xE2\x82\xAC\\u20ac\"}")));
  EXPECT_THAT(parsed[27].calls, IsEmpty());
  EXPECT_EQ(parsed[27].content, Cases()[27].text);
  EXPECT_THAT(parsed[28].calls,
              ElementsAre(FieldsAre("", "forced", R"({"x": 3, "nested": {"s": "}\""}})")));
  EXPECT_THAT(parsed[29].calls, IsEmpty());
  EXPECT_THAT(parsed[30].calls, IsEmpty());
  EXPECT_THAT(parsed[31].calls,
              ElementsAre(FieldsAre("", "f",
                                    R"({"name": "inner", "arguments": [1], "parameters": null})")));
}

TEST(ToolCallStreamParserTest, ArgumentsGoOutAsTheyAreWrittenAndNeverPastTheirEnd) {
  ToolCallStreamParser parser(ToolCallFormat::kHermes);
  EXPECT_THAT(parser.Append("Sure. <tool_call>\n{\"name\": \"wea"), IsEmpty());
  EXPECT_EQ(parser.content_end(), 5u);  // "Sure." without the space before the marker
  std::vector<ToolCallDelta> deltas = parser.Append("ther\", \"arguments\": {\"city\"");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].index, 0);
  EXPECT_EQ(deltas[0].name, "weather");
  EXPECT_EQ(deltas[0].arguments, "{\"city\"");
  // A character split between two pieces waits for its second byte.
  deltas = parser.Append(": \"Z\xC3");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].name, "");
  EXPECT_EQ(deltas[0].arguments, ": \"Z");
  // The rest of the arguments, not the wrapper's '}' nor the tag, nor the next call's head
  // before its name is whole.
  deltas = parser.Append("\xBCrich\"}}\n</tool_call>\n<tool_call>{\"name\": \"ti");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].arguments, "\xC3\xBCrich\"}");
  deltas = parser.Append("me\"}</tool_call>");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].index, 1);
  EXPECT_EQ(deltas[0].name, "time");
  EXPECT_EQ(deltas[0].arguments, "{}");  // no arguments: an empty object, once the call ends
  EXPECT_THAT(parser.Finish(), IsEmpty());
  EXPECT_EQ(parser.content_end(), 5u);

  // A named function's arguments from their first byte; nothing after the object.
  ToolCallStreamParser forced = ToolCallStreamParser::Arguments("f");
  deltas = forced.Append(" {\"a\":");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].name, "f");
  EXPECT_EQ(deltas[0].arguments, "{\"a\":");
  EXPECT_EQ(forced.content_end(), 0u);
  deltas = forced.Append(" 1}\n");
  ASSERT_EQ(deltas.size(), 1u);
  EXPECT_EQ(deltas[0].arguments, " 1}");
}

TEST(ToolCallStreamParserTest, AfterAFailureEverythingIsContentAndNoDeltasCome) {
  const std::string begun = "Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\"";
  const std::string broken = ": 1,, \"b\": 2}}";  // not JSON
  ToolCallStreamParser parser(ToolCallFormat::kHermes);
  EXPECT_EQ(parser.Append(begun).size(), 1u);
  EXPECT_EQ(parser.content_end(), 2u);
  EXPECT_FALSE(parser.content_only());
  EXPECT_THAT(parser.Append(broken), IsEmpty());
  EXPECT_TRUE(parser.content_only());
  EXPECT_EQ(parser.content_end(), begun.size() + broken.size());  // all of it, at once
  EXPECT_THAT(parser.Append("</tool_call>"), IsEmpty());
  EXPECT_THAT(parser.Finish(), IsEmpty());
  EXPECT_EQ(parser.Result().content, begun + broken + "</tool_call>");

  // A marker never completed: held back while it may begin one, content at the end.
  ToolCallStreamParser cut(ToolCallFormat::kHermes);
  cut.Append("Hello <tool_ca");
  EXPECT_EQ(cut.content_end(), 5u);
  EXPECT_THAT(cut.Finish(), IsEmpty());
  EXPECT_EQ(cut.content_end(), 14u);
  EXPECT_EQ(cut.Result().content, "Hello <tool_ca");

  // No format: content from the start.
  const std::string call = "<tool_call>{\"name\": \"f\"}</tool_call>";
  ToolCallStreamParser none(ToolCallFormat::kNone);
  none.Append(call);
  EXPECT_TRUE(none.content_only());
  EXPECT_EQ(none.content_end(), call.size());
}

}  // namespace
}  // namespace kvserve
