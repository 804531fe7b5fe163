#include "base/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using Fields = std::vector<std::pair<std::string, LogValue>>;
using Json = nlohmann::json;

LogValue Str(std::string text) { return LogValue{LogValue::Kind::kString, std::move(text)}; }
LogValue Num(std::string text) { return LogValue{LogValue::Kind::kNumber, std::move(text)}; }

absl::Time At() {
  // 2026-12-07T18:50:01.123Z
  return absl::FromUnixMillis(1796669401123);
}

// Sends the log to a temporary file for the test's duration, restoring every setting after.
class LogFile {
 public:
  LogFile() {
    char name[] = "/tmp/kvserve_log_test_XXXXXX";
    fd_ = mkstemp(name);
    path_ = name;
    SetLogFd(fd_);
  }
  ~LogFile() {
    SetLogFd(2);
    SetLogLevel(LogLevel::kInfo);
    SetLogFormat(LogFormat::kText);
    close(fd_);
    unlink(path_.c_str());
  }
  std::vector<std::string> Lines() const {
    std::ifstream in(path_);
    std::stringstream contents;
    contents << in.rdbuf();
    std::vector<std::string> lines = absl::StrSplit(contents.str(), '\n', absl::SkipEmpty());
    return lines;
  }
  std::string Text() const {
    std::ifstream in(path_);
    std::stringstream contents;
    contents << in.rdbuf();
    return contents.str();
  }

 private:
  int fd_ = -1;
  std::string path_;
};

TEST(LogFormatTest, TextLineIsTimeLevelEventAndKeyValues) {
  const Fields fields = {
      {"id", Str("abc-1")}, {"worker", Str("127.0.0.1:50061")}, {"ttft_ms", Num("12.3")}};
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(), LogLevel::kInfo, "request_done", fields),
            "2026-12-07T18:50:01.123Z INFO request_done id=abc-1 worker=127.0.0.1:50061 "
            "ttft_ms=12.3\n");
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(), LogLevel::kWarning, "worker_lost", {}),
            "2026-12-07T18:50:01.123Z WARNING worker_lost\n");
}

TEST(LogFormatTest, TextQuotesWhatWouldSplitTheLineOrTheField) {
  const Fields fields = {{"error", Str("worker 1 stopped answering")},
                         {"empty", Str("")},
                         {"quote", Str("say \"hi\"\\now")},
                         {"eq", Str("a=b")},
                         {"lines", Str("one\ntwo\r\tthree\x01")},
                         {"utf8", Str("caf\xC3\xA9")}};
  EXPECT_EQ(FormatLogLine(LogFormat::kText, At(), LogLevel::kError, "x", fields),
            "2026-12-07T18:50:01.123Z ERROR x error=\"worker 1 stopped answering\" empty=\"\" "
            "quote=\"say \\\"hi\\\"\\\\now\" eq=\"a=b\" lines=\"one\\ntwo\\r\\tthree\\x01\" "
            "utf8=\"caf\xC3\xA9\"\n");
}

TEST(LogFormatTest, JsonLineIsOneObjectWithTypedValues) {
  const Fields fields = {{"id", Str("abc")},
                         {"tokens", Num("42")},
                         {"ttft_ms", Num("12.5")},
                         {"migrated", LogValue{LogValue::Kind::kBool, "true"}}};
  const std::string line =
      FormatLogLine(LogFormat::kJson, At(), LogLevel::kInfo, "request_done", fields);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const Json parsed = Json::parse(line);
  EXPECT_EQ(parsed["time"], "2026-12-07T18:50:01.123Z");
  EXPECT_EQ(parsed["level"], "info");
  EXPECT_EQ(parsed["event"], "request_done");
  EXPECT_EQ(parsed["id"], "abc");
  EXPECT_EQ(parsed["tokens"], 42);
  EXPECT_DOUBLE_EQ(parsed["ttft_ms"].get<double>(), 12.5);
  EXPECT_EQ(parsed["migrated"], true);
  // The fields keep the order they were given in.
  EXPECT_LT(line.find("\"tokens\""), line.find("\"ttft_ms\""));
}

TEST(LogFormatTest, JsonEscapesControlBytesAndReplacesInvalidUtf8) {
  const std::string nasty =
      "q\"b\\n\n\x01\x7f"
      "caf\xC3\xA9 \xF0\x9F\x98\x80"            // valid: é and an emoji
      "|\xFF|\xC0\xAF|\xED\xA0\x80|\xE2\x82|";  // invalid: stray, overlong, surrogate, truncated
  const std::string line =
      FormatLogLine(LogFormat::kJson, At(), LogLevel::kDebug, "e\"v", {{"k\n", Str(nasty)}});
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const Json parsed = Json::parse(line);  // throws on invalid UTF-8 or a bad escape
  EXPECT_EQ(parsed["event"], "e\"v");
  EXPECT_EQ(parsed["level"], "debug");
  const std::string replacement = "\xEF\xBF\xBD";
  EXPECT_EQ(parsed["k\n"].get<std::string>(),
            "q\"b\\n\n\x01\x7f"
            "caf\xC3\xA9 \xF0\x9F\x98\x80|" +
                replacement + "|" + replacement + replacement + "|" + replacement + replacement +
                replacement + "|" + replacement + replacement + "|");
}

TEST(LogEventTest, NumbersAreWrittenAsNumbers) {
  LogFile file;
  SetLogFormat(LogFormat::kJson);
  KVSERVE_LOG(kInfo, "numbers")
      .Field("int", -3)
      .Field("int64", int64_t{1} << 40)
      .Field("size", size_t{7})
      .Field("ms", 12.34567)
      .Field("whole", 5.0)
      .Field("nan", std::nan(""))
      .Field("inf", std::numeric_limits<double>::infinity())
      .FieldMs("ttft_ms", absl::Microseconds(1500))
      .Field("flag", false)
      .Status(absl::UnavailableError("gone"));
  const std::vector<std::string> lines = file.Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], testing::HasSubstr(
                            "\"int\":-3,\"int64\":1099511627776,\"size\":7,\"ms\":12.346,"
                            "\"whole\":5,\"nan\":null,\"inf\":null,\"ttft_ms\":1.5,\"flag\":false,"
                            "\"code\":\"UNAVAILABLE\",\"error\":\"gone\"}"));
  EXPECT_NO_THROW(Json::parse(lines[0]));
}

TEST(LogEventTest, ALevelThatIsOffWritesNothingAndEvaluatesNoField) {
  LogFile file;
  SetLogLevel(LogLevel::kWarning);
  int evaluated = 0;
  auto field = [&evaluated] {
    ++evaluated;
    return std::string("v");
  };
  KVSERVE_LOG(kDebug, "debug_event").Field("k", field());
  KVSERVE_LOG(kInfo, "info_event").Field("k", field());
  KVSERVE_LOG(kWarning, "warning_event").Field("k", field());
  KVSERVE_LOG(kError, "error_event").Field("k", field());
  EXPECT_EQ(evaluated, 2);
  const std::vector<std::string> lines = file.Lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], testing::HasSubstr(" WARNING warning_event k=v"));
  EXPECT_THAT(lines[1], testing::HasSubstr(" ERROR error_event k=v"));
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  SetLogLevel(LogLevel::kDebug);
  EXPECT_TRUE(LogEnabled(LogLevel::kDebug));
}

TEST(LogEventTest, LinesFromManyThreadsNeverInterleave) {
  LogFile file;
  SetLogFormat(LogFormat::kJson);
  constexpr int kThreads = 8;
  constexpr int kLines = 300;
  const std::string long_value(3000, 'x');  // lines near a pipe's atomic-write size
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &long_value] {
      for (int i = 0; i < kLines; ++i) {
        KVSERVE_LOG(kInfo, "line").Field("thread", t).Field("i", i).Field("pad", long_value);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::vector<std::string> lines = file.Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLines));
  std::vector<int> next(kThreads, 0);
  for (const std::string& line : lines) {
    const Json parsed = Json::parse(line);
    const int thread = parsed["thread"].get<int>();
    EXPECT_EQ(parsed["i"].get<int>(), next[thread]++);  // each thread's lines in its order
    EXPECT_EQ(parsed["pad"].get<std::string>().size(), long_value.size());
  }
}

TEST(LogSettingsTest, LevelAndFormatNamesParseAndOthersAreRefused) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("verbose").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ParseLogLevel("warn").status().message()),
              testing::HasSubstr("debug, info, warning or error"));
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  EXPECT_EQ(ParseLogFormat("xml").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve
