// PythonJsonDumps and PythonStrip against what Python 3.11 prints for the same input (the
// expected strings below were copied from json.dumps / str.strip).
#include "tokenizer/python_text.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

using Json = nlohmann::ordered_json;

Json Sample() {
  return Json::parse(R"({"name": "f", "list": [1, 2.5, null, true], "empty": [], "obj": {},
                         "s": "é\"\\\n\u0001\u007f😀", "big": 1e16, "small": 1e-05})");
}

TEST(PythonJsonDumpsTest, DefaultsAreTransformersTojson) {
  EXPECT_EQ(PythonJsonDumps(Sample(), {}),
            "{\"name\": \"f\", \"list\": [1, 2.5, null, true], \"empty\": [], \"obj\": {}, "
            "\"s\": \"é\\\"\\\\\\n\\u0001\x7f😀\", \"big\": 1e+16, \"small\": 1e-05}");
}

TEST(PythonJsonDumpsTest, EnsureAsciiEscapesEverythingOutsidePrintableAscii) {
  EXPECT_EQ(PythonJsonDumps(Sample(), {.ensure_ascii = true}),
            "{\"name\": \"f\", \"list\": [1, 2.5, null, true], \"empty\": [], \"obj\": {}, "
            "\"s\": \"\\u00e9\\\"\\\\\\n\\u0001\\u007f\\ud83d\\ude00\", \"big\": 1e+16, "
            "\"small\": 1e-05}");
}

TEST(PythonJsonDumpsTest, IndentPutsItemsOnTheirOwnLinesAndKeepsEmptyContainersShort) {
  EXPECT_EQ(PythonJsonDumps(Sample(), {.indent = "  "}),
            "{\n  \"name\": \"f\",\n  \"list\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n"
            "  \"empty\": [],\n  \"obj\": {},\n  \"s\": \"é\\\"\\\\\\n\\u0001\x7f😀\",\n"
            "  \"big\": 1e+16,\n  \"small\": 1e-05\n}");
  EXPECT_EQ(PythonJsonDumps(Json::parse(R"({"a": [1]})"), {.indent = ""}), "{\n\"a\": [\n1\n]\n}");
}

TEST(PythonJsonDumpsTest, SeparatorsAndSortKeys) {
  EXPECT_EQ(
      PythonJsonDumps(Sample(), {.item_separator = ",", .key_separator = ":", .sort_keys = true}),
      "{\"big\":1e+16,\"empty\":[],\"list\":[1,2.5,null,true],\"name\":\"f\",\"obj\":{},"
      "\"s\":\"é\\\"\\\\\\n\\u0001\x7f😀\",\"small\":1e-05}");
}

TEST(PythonJsonDumpsTest, NonFiniteFloatsAsPythonSpellsThem) {
  EXPECT_EQ(PythonJsonDumps(Json::array({std::nan(""), 1.0 / 0.0, -1.0 / 0.0, 100.0, 0.1}), {}),
            "[NaN, Infinity, -Infinity, 100.0, 0.1]");
}

TEST(PythonStripTest, StripsWhatStrIsspaceCallsWhitespace) {
  EXPECT_EQ(PythonStrip("\u3000 x \u2028\x1c"), "x");
  EXPECT_EQ(PythonStrip(" \t\n"), "");
  EXPECT_EQ(PythonStrip("é"), "é");
  EXPECT_EQ(PythonStrip("\xff "), "\xff");  // invalid UTF-8 stays
}

TEST(PythonStripTest, StripsTheGivenCodePoints) {
  EXPECT_EQ(PythonStrip("xxhixyx", "xy"), "hi");
  EXPECT_EQ(PythonStrip("éaé", "é"), "a");
  EXPECT_EQ(PythonStrip(" a ", ""), " a ");
}

}  // namespace
}  // namespace kvserve
