// ParseToolCalls on each format's outputs (one call, several, content beside them, a call cut off
// before its closing tag, arguments as JSON text, and outputs that are not calls; arguments come
// back as written), the format of each real chat template in testdata, and MakeToolCallId.
// tool_call_stream_parser_test.cc has the same parse fed in pieces.
#include "tokenizer/tool_call_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::FieldsAre;
using ::testing::IsEmpty;

TEST(ToolCallParserTest, HermesCallsWithContentBefore) {
  const ParsedToolCalls parsed = ParseToolCalls(
      ToolCallFormat::kHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(parsed.content, "Let me look.");
  EXPECT_THAT(parsed.calls, ElementsAre(FieldsAre("", "weather", R"({"city": "Paris"})"),
                                        FieldsAre("", "time", "{}")));
}

TEST(ToolCallParserTest, HermesCallCutOffBeforeItsClosingTagStillCounts) {
  const ParsedToolCalls parsed = ParseToolCalls(
      ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}");
  EXPECT_EQ(parsed.content, "");
  EXPECT_THAT(parsed.calls, ElementsAre(FieldsAre("", "f", R"({"x": 1})")));
}

TEST(ToolCallParserTest, HermesMalformedCallIsContent) {
  for (const std::string text :
       {"<tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>",     // JSON cut off
        "<tool_call>{\"arguments\": {}}</tool_call>",                    // no name
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",  // arguments not an object
        "no calls here"}) {
    SCOPED_TRACE(text);
    const ParsedToolCalls parsed = ParseToolCalls(ToolCallFormat::kHermes, text);
    EXPECT_EQ(parsed.content, text);
    EXPECT_THAT(parsed.calls, IsEmpty());
  }
}

TEST(ToolCallParserTest, Llama3JsonWholeOutputOrSemicolonJoined) {
  ParsedToolCalls parsed =
      ParseToolCalls(ToolCallFormat::kLlama3Json,
                     R"({"name": "weather", "parameters": {"city": "Paris; France"}})");
  EXPECT_THAT(parsed.calls, ElementsAre(FieldsAre("", "weather", R"({"city": "Paris; France"})")));
  parsed = ParseToolCalls(ToolCallFormat::kLlama3Json,
                          "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; "
                          "{\"name\": \"b\", \"parameters\": {\"n\": 2}}");
  EXPECT_THAT(parsed.calls,
              ElementsAre(FieldsAre("", "a", "{}"), FieldsAre("", "b", R"({"n": 2})")));
  parsed = ParseToolCalls(ToolCallFormat::kLlama3Json, "The answer is {\"name\": 1}");
  EXPECT_EQ(parsed.content, "The answer is {\"name\": 1}");
  EXPECT_THAT(parsed.calls, IsEmpty());
}

TEST(ToolCallParserTest, MistralListAfterContent) {
  ParsedToolCalls parsed =
      ParseToolCalls(ToolCallFormat::kMistral,
                     "Sure.[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"q\": \"x\"}}, "
                     "{\"name\": \"b\", \"arguments\": {}}]");
  EXPECT_EQ(parsed.content, "Sure.");
  EXPECT_THAT(parsed.calls,
              ElementsAre(FieldsAre("", "a", R"({"q": "x"})"), FieldsAre("", "b", "{}")));
  parsed = ParseToolCalls(ToolCallFormat::kMistral, "[TOOL_CALLS] not json");
  EXPECT_EQ(parsed.content, "[TOOL_CALLS] not json");
  EXPECT_THAT(parsed.calls, IsEmpty());
}

TEST(ToolCallParserTest, NoFormatMeansContent) {
  const ParsedToolCalls parsed =
      ParseToolCalls(ToolCallFormat::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(parsed.content, "<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_THAT(parsed.calls, IsEmpty());
}

TEST(ToolCallParserTest, EachRealTemplateTeachesItsFormat) {
  const std::map<std::string, ToolCallFormat> want = {
      {"HuggingFaceTB-SmolLM2-135M-Instruct", ToolCallFormat::kNone},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolCallFormat::kHermes},
      {"Qwen-Qwen2.5-7B-Instruct", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B", ToolCallFormat::kHermes},
      {"google-gemma-2-2b-it", ToolCallFormat::kNone},
      {"meta-llama-Llama-3.1-8B-Instruct", ToolCallFormat::kLlama3Json},
      {"meta-llama-Llama-3.2-3B-Instruct", ToolCallFormat::kLlama3Json},
      {"microsoft-Phi-3.5-mini-instruct", ToolCallFormat::kNone},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolCallFormat::kMistral},
  };
  const std::filesystem::path dir =
      std::filesystem::path(KVSERVE_SOURCE_DIR) / "tests/tokenizer/testdata/chat_templates";
  for (const auto& [name, format] : want) {
    SCOPED_TRACE(name);
    std::ifstream file(dir / (name + ".jinja"));
    ASSERT_TRUE(file.is_open());
    std::stringstream source;
    source << file.rdbuf();
    EXPECT_EQ(DetectToolCallFormat(source.str()), format);
  }
}

TEST(ToolCallParserTest, FormatNamesRoundTrip) {
  for (ToolCallFormat format : {ToolCallFormat::kNone, ToolCallFormat::kHermes,
                                ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    EXPECT_EQ(ToolCallFormatFromName(ToolCallFormatName(format)), format);
  }
  EXPECT_EQ(ToolCallFormatFromName("pythonic"), std::nullopt);
}

TEST(ToolCallParserTest, IdsAreDistinctAndMistralsAreNineAlphanumerics) {
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) {
    const std::string id = MakeToolCallId(ToolCallFormat::kHermes, 42, i);
    EXPECT_EQ(id.size(), 5u + 24u);
    EXPECT_EQ(id.substr(0, 5), "call_");
    ids.insert(id);
    const std::string mistral = MakeToolCallId(ToolCallFormat::kMistral, 42, i);
    ASSERT_EQ(mistral.size(), 9u);
    for (char c : mistral) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << mistral;
    ids.insert(mistral);
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ(MakeToolCallId(ToolCallFormat::kHermes, 42, 3),
            MakeToolCallId(ToolCallFormat::kHermes, 42, 3));
  EXPECT_NE(MakeToolCallId(ToolCallFormat::kHermes, 42, 3),
            MakeToolCallId(ToolCallFormat::kHermes, 43, 3));
}

}  // namespace
}  // namespace kvserve
