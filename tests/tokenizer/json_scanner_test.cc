// JsonScanner: where values and keys begin and end (and at what depth), a number's end at the
// byte after it, strings decoded as nlohmann decodes them, grammar errors, and on random JSON
// documents that it reads each to its last byte.
#include "tokenizer/json_scanner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvserve {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;

// Feeds `text` and writes what each byte did: "b" begins / "e" ends, "k" for a key, then the
// depth and the byte's offset ("e0@7"); "!" at an error. Stops once the value is done.
std::vector<std::string> Events(std::string_view text, JsonScanner* scanner) {
  std::vector<std::string> events;
  for (size_t at = 0; at < text.size() && !scanner->done();) {
    const JsonScanner::Step step = scanner->Feed(text[at]);
    if (step.error) {
      events.push_back("!@" + std::to_string(at));
      break;
    }
    if (step.begins || step.ends) {
      events.push_back(std::string(step.begins ? "b" : "e") + (step.key ? "k" : "") +
                       std::to_string(step.depth) + "@" + std::to_string(at));
    }
    if (step.taken) ++at;
  }
  return events;
}

TEST(JsonScannerTest, ValuesAndKeysBeginAndEndAtTheirDepth) {
  JsonScanner scanner;
  //                        0123456789012345678901234
  EXPECT_THAT(Events(R"({"a": [1, "}"], "b": null} trailing)", &scanner),
              ElementsAre("b0@0", "bk1@1", "ek1@3", "b1@6", "b2@7", "e2@8", "b2@10", "e2@12",
                          "e1@13", "bk1@16", "ek1@18", "b1@21", "e1@24", "e0@25"));
  EXPECT_TRUE(scanner.done());
  EXPECT_FALSE(scanner.failed());
}

TEST(JsonScannerTest, ANumberEndsAtTheByteAfterItWhichIsFedAgain) {
  JsonScanner scanner;
  for (char c : std::string_view("[-1.5e+3")) EXPECT_TRUE(scanner.Feed(c).taken);
  const JsonScanner::Step comma = scanner.Feed(',');
  EXPECT_FALSE(comma.taken);
  EXPECT_TRUE(comma.ends);
  EXPECT_EQ(comma.depth, 1);
  EXPECT_TRUE(scanner.Feed(',').taken);
  JsonScanner closed;
  EXPECT_THAT(Events("[0]", &closed), ElementsAre("b0@0", "b1@1", "e1@2", "e0@2"));
}

TEST(JsonScannerTest, StringsDecodeAsNlohmannDecodesThem) {
  for (const std::string text : {R"("plain")", R"("a\"b\\c\/d\b\f\n\r\t")", R"("caf\u00e9 \u00E9")",
                                 R"("\ud83d\ude00 and \uD834\uDD1E")",
                                 "\"raw \xC3\xA9 \xF0\x9F\x98\x80\"", R"("\u0000")", R"("")"}) {
    SCOPED_TRACE(text);
    JsonScanner scanner;
    for (char c : text) ASSERT_FALSE(scanner.Feed(c).error);
    EXPECT_TRUE(scanner.done());
    EXPECT_EQ(scanner.string_value(), Json::parse(text).get<std::string>());
  }
}

TEST(JsonScannerTest, AnEscapeCountsOnceWhole) {
  JsonScanner scanner;
  for (char c : std::string_view(R"("x\u00)")) scanner.Feed(c);
  EXPECT_EQ(scanner.string_value(), "x");
  for (char c : std::string_view(R"(e9\ud83d)")) scanner.Feed(c);
  EXPECT_EQ(scanner.string_value(), "x\xC3\xA9");  // the high surrogate waits for its pair
  for (char c : std::string_view(R"(\ude00)")) scanner.Feed(c);
  EXPECT_EQ(scanner.string_value(), "x\xC3\xA9\xF0\x9F\x98\x80");
}

TEST(JsonScannerTest, GrammarErrorsAreErrors) {
  for (const std::string text :
       {"{]", "[1,]", "{,}", "{\"a\" 1}", "{\"a\":1,}", "{1: 2}", "tru e", "nul", "\"\\x\"",
        "\"\\u12G4\"", "\"\\ud83d\"", "\"\\ude00\"", "\"\\ud83dx\"", "\"a\nb\"", "[1 2]", "}", "+1",
        "{\"a\":}", "[\"a\" \"b\"]"}) {
    SCOPED_TRACE(text);
    JsonScanner scanner;
    bool error = false;
    for (size_t at = 0; at < text.size() && !error && !scanner.done();) {
      const JsonScanner::Step step = scanner.Feed(text[at]);
      error = step.error;
      if (step.taken) ++at;
    }
    // "nul" is cut off rather than wrong: not done.
    EXPECT_TRUE(error || !scanner.done());
    if (text != "nul") {
      EXPECT_TRUE(scanner.failed());
    }
  }
}

// A random JSON value: nested objects and lists of strings (with escapes and non-ASCII),
// numbers and literals.
Json RandomValue(std::mt19937* rng, int depth) {
  auto pick = [rng](int n) { return static_cast<int>((*rng)() % n); };
  switch (depth > 3 ? 2 + pick(4) : pick(6)) {
    case 0: {
      Json object = Json::object();
      for (int i = pick(4); i > 0; --i) {
        object["k" + std::to_string(pick(100))] = RandomValue(rng, depth + 1);
      }
      return object;
    }
    case 1: {
      Json list = Json::array();
      for (int i = pick(4); i > 0; --i) list.push_back(RandomValue(rng, depth + 1));
      return list;
    }
    case 2: {
      static const std::vector<std::string> kPieces = {
          "a", "}", "]", "\"", "\\", "\n", "\x01", "\xC3\xA9", "\xF0\x9F\x98\x80", "{", ",", ":"};
      std::string text;
      for (int i = pick(6); i > 0; --i) text += kPieces[pick(static_cast<int>(kPieces.size()))];
      return text;
    }
    case 3:
      return pick(2) == 0 ? Json(pick(2000) - 1000) : Json((pick(2000) - 1000) / 7.0);
    case 4:
      return pick(2) == 0;
    default:
      return nullptr;
  }
}

TEST(JsonScannerTest, RandomDocumentsAreReadToTheirLastByte) {
  const unsigned seed = std::random_device()();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (int round = 0; round < 2000; ++round) {
    Json value = Json::object();
    value["v"] = RandomValue(&rng, 0);
    const std::string text = value.dump(rng() % 2 == 0 ? -1 : 2);
    SCOPED_TRACE(text);
    JsonScanner scanner;
    size_t at = 0;
    while (!scanner.done()) {
      ASSERT_LT(at, text.size());
      const JsonScanner::Step step = scanner.Feed(text[at]);
      ASSERT_FALSE(step.error) << "at " << at;
      if (step.taken) ++at;
    }
    EXPECT_EQ(at, text.size());
  }
}

}  // namespace
}  // namespace kvserve
