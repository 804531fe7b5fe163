// Structured logging: one event per line, written to stderr (or a file descriptor a test sets)
// with a single write(2), so lines from different threads never interleave.
//
//   KVSERVE_LOG(kInfo, "request_done").Field("id", id).Field("worker", worker)
//       .Field("ttft_ms", 12.3);
//
// prints, in the text format (the default),
//   2026-12-07T18:50:01.123Z INFO request_done id=abc worker=127.0.0.1:50061 ttft_ms=12.3
// and in the JSON format, one object per line,
//   {"time":"2026-12-07T18:50:01.123Z","level":"info","event":"request_done","id":"abc",...}
//
// An event is a name (snake_case, what happened) and fields in the order given. In text, a value
// that is empty or holds a space, '"', '=', '\' or a byte outside printable ASCII is quoted with
// C-style escapes (\" \\ \n \t \xNN), so a line is always one line and splits on spaces. In JSON,
// strings are escaped as RFC 8259 asks and invalid UTF-8 becomes U+FFFD, so every line parses;
// numbers are JSON numbers (a NaN or infinity is null) and booleans true / false. Field names are
// the caller's: "time", "level" and "event" are taken by the line itself.
//
// A level that is off costs one relaxed atomic load: KVSERVE_LOG evaluates none of its fields.
//
// Thread-safety: thread-safe. SetLogLevel / SetLogFormat / SetLogFd may be called at any time
// (a line being written uses the settings it started with).
#ifndef KVSERVE_BASE_LOG_H_
#define KVSERVE_BASE_LOG_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvserve {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };
enum class LogFormat { kText, kJson };

// "debug" | "info" | "warning" | "error"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);
// "text" | "json"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

void SetLogLevel(LogLevel level);
void SetLogFormat(LogFormat format);
// Where lines go (default 2, stderr). The descriptor stays the caller's.
void SetLogFd(int fd);

namespace log_internal {
extern std::atomic<int> min_level;
}  // namespace log_internal

inline bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= log_internal::min_level.load(std::memory_order_relaxed);
}

// One field's value as the line will hold it.
struct LogValue {
  enum class Kind { kString, kNumber, kBool };
  Kind kind = Kind::kString;
  std::string text;  // a string's bytes, or the number / "true" / "false" as written
};

// The line of one event in `format`, with its newline. The formatting of every line, exposed so
// that tests see exactly what is written.
std::string FormatLogLine(LogFormat format, absl::Time time, LogLevel level,
                          absl::string_view event,
                          const std::vector<std::pair<std::string, LogValue>>& fields);

// An event being built; written when it is destroyed (the end of the KVSERVE_LOG statement).
class LogEvent {
 public:
  LogEvent(LogLevel level, absl::string_view event);
  ~LogEvent();
  LogEvent(const LogEvent&) = delete;
  LogEvent& operator=(const LogEvent&) = delete;

  LogEvent& Field(absl::string_view key, absl::string_view value);
  LogEvent& Field(absl::string_view key, const std::string& value) {
    return Field(key, absl::string_view(value));
  }
  LogEvent& Field(absl::string_view key, const char* value) {
    return Field(key, absl::string_view(value));
  }
  LogEvent& Field(absl::string_view key, bool value);
  LogEvent& Field(absl::string_view key, int value) {
    return Field(key, static_cast<long long>(value));
  }
  LogEvent& Field(absl::string_view key, long value) {
    return Field(key, static_cast<long long>(value));
  }
  LogEvent& Field(absl::string_view key, long long value);
  LogEvent& Field(absl::string_view key, unsigned value) {
    return Field(key, static_cast<unsigned long long>(value));
  }
  LogEvent& Field(absl::string_view key, unsigned long value) {
    return Field(key, static_cast<unsigned long long>(value));
  }
  LogEvent& Field(absl::string_view key, unsigned long long value);
  // Printed with at most 3 decimals, trailing zeros dropped (ms durations).
  LogEvent& Field(absl::string_view key, double value);
  // In milliseconds, as a number.
  LogEvent& FieldMs(absl::string_view key, absl::Duration value) {
    return Field(key, absl::ToDoubleMilliseconds(value));
  }
  // "code" (e.g. "UNAVAILABLE") and, when not OK, "error" (the message).
  LogEvent& Status(const absl::Status& status);

 private:
  const LogLevel level_;
  const std::string event_;
  std::vector<std::pair<std::string, LogValue>> fields_;
};

// Writes `line` to the log's descriptor in one write(2) (more only when the kernel takes part).
void WriteLogLine(absl::string_view line);

}  // namespace kvserve

// The event is built and written only when `level` is on; the fields are not evaluated otherwise.
#define KVSERVE_LOG(level, event)                           \
  if (!::kvserve::LogEnabled(::kvserve::LogLevel::level)) { \
  } else                                                    \
    ::kvserve::LogEvent(::kvserve::LogLevel::level, event)

#endif  // KVSERVE_BASE_LOG_H_
