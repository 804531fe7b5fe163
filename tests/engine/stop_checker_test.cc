// StopChecker: stop strings found across deltas, held-back text never leaks, text after a stop
// is dropped, include_stop_str_in_output keeps the stop string.
#include "engine/stop_checker.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

// Pushes the deltas in order; returns everything released and whether/which stop matched.
std::string Feed(StopChecker& checker, const std::vector<std::string>& deltas,
                 std::optional<size_t>* stopped = nullptr) {
  std::string out;
  for (const std::string& delta : deltas) {
    StopChecker::Result result = checker.Push(delta);
    out += result.text;
    if (result.stopped.has_value() && stopped != nullptr) *stopped = result.stopped;
  }
  return out;
}

TEST(StopCheckerTest, WithoutStopStringsTextPassesThrough) {
  StopChecker checker({}, false);
  EXPECT_EQ(checker.Push("hello").text, "hello");
  EXPECT_EQ(checker.held_bytes(), 0u);
}

TEST(StopCheckerTest, StopStringSplitAcrossDeltasNeverLeaks) {
  StopChecker checker({"STOP"}, false);
  StopChecker::Result a = checker.Push("abc S");
  EXPECT_EQ(a.text, "abc ");  // "S" could start "STOP": held back
  StopChecker::Result b = checker.Push("TO");
  EXPECT_EQ(b.text, "");
  EXPECT_EQ(checker.held_bytes(), 3u);
  StopChecker::Result c = checker.Push("P and more");
  EXPECT_EQ(c.text, "");
  ASSERT_TRUE(c.stopped.has_value());
  EXPECT_EQ(*c.stopped, 0u);
  EXPECT_TRUE(checker.stopped());
  EXPECT_EQ(checker.Push("later").text, "");  // nothing after a stop
}

TEST(StopCheckerTest, FalseStartIsReleasedOnceDecided) {
  StopChecker checker({"STOP"}, false);
  EXPECT_EQ(checker.Push("xST").text, "x");
  EXPECT_EQ(checker.Push("OX").text, "STOX");
  EXPECT_FALSE(checker.stopped());
}

TEST(StopCheckerTest, IncludeStopStringKeepsItButNothingAfter) {
  StopChecker checker({"end"}, true);
  std::optional<size_t> stopped;
  EXPECT_EQ(Feed(checker, {"the e", "nd is", " near"}, &stopped), "the end");
  EXPECT_EQ(stopped, 0u);
}

TEST(StopCheckerTest, EarliestOfSeveralStopStringsWins) {
  StopChecker checker({"world", "lo w"}, false);
  std::optional<size_t> stopped;
  EXPECT_EQ(Feed(checker, {"hel", "lo world"}, &stopped), "hel");
  EXPECT_EQ(stopped, 1u);
}

TEST(StopCheckerTest, FlushReleasesHeldTextWhenFinishingOtherwise) {
  StopChecker checker({"</s>"}, false);
  EXPECT_EQ(checker.Push("text </").text, "text ");
  EXPECT_EQ(checker.Flush(), "</");
}

TEST(StopCheckerTest, MultiByteStopStringCutsAtCharacterBoundary) {
  StopChecker checker({"\xC3\xA9t\xC3\xA9"}, false);  // "été"
  std::optional<size_t> stopped;
  const std::string out = Feed(checker, {"caf\xC3", "\xA9 \xC3\xA9", "t\xC3\xA9!"}, &stopped);
  EXPECT_EQ(out, "caf\xC3\xA9 ");
  EXPECT_TRUE(stopped.has_value());
}

TEST(StopCheckerTest, EveryRandomSplitGivesTheSameResult) {
  const std::string text = "one two STOP three";
  for (size_t cut1 = 0; cut1 <= text.size(); ++cut1) {
    for (size_t cut2 = cut1; cut2 <= text.size(); ++cut2) {
      StopChecker checker({"STOP", "two S"}, false);
      std::optional<size_t> stopped;
      const std::string out =
          Feed(checker, {text.substr(0, cut1), text.substr(cut1, cut2 - cut1), text.substr(cut2)},
               &stopped);
      EXPECT_EQ(out, "one ") << cut1 << " " << cut2;
      EXPECT_EQ(stopped, 1u);
    }
  }
}

}  // namespace
}  // namespace kvserve
