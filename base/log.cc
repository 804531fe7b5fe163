#include "base/log.h"

#include <errno.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvserve {

namespace log_internal {
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
}  // namespace log_internal

namespace {

std::atomic<int> log_format{static_cast<int>(LogFormat::kText)};
std::atomic<int> log_fd{2};

absl::string_view TextLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarning:
      return "WARNING";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

absl::string_view JsonLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

// The length of the valid UTF-8 sequence at text[i], or 0 when the bytes there are not one
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t Utf8SequenceLength(absl::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  uint32_t code = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2;
    code = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3;
    code = lead & 0x0F;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kMinimum[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

// Appends the backslash escape both formats give `c` (quote, backslash, \n, \r, \t); false
// when `c` has none.
bool AppendShortEscape(unsigned char c, std::string* out) {
  switch (c) {
    case '"':
      out->append("\\\"");
      return true;
    case '\\':
      out->append("\\\\");
      return true;
    case '\n':
      out->append("\\n");
      return true;
    case '\r':
      out->append("\\r");
      return true;
    case '\t':
      out->append("\\t");
      return true;
    default:
      return false;
  }
}

void AppendJsonString(absl::string_view text, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t length = Utf8SequenceLength(text, i);
      if (length == 0) {
        out->append("\xEF\xBF\xBD");  // U+FFFD for a byte that starts no valid sequence
        ++i;
      } else {
        out->append(text.data() + i, length);
        i += length;
      }
      continue;
    }
    if (!AppendShortEscape(c, out)) {
      if (c < 0x20 || c == 0x7F) {
        absl::StrAppendFormat(out, "\\u%04x", c);
      } else {
        out->push_back(static_cast<char>(c));
      }
    }
    ++i;
  }
  out->push_back('"');
}

bool TextNeedsQuotes(absl::string_view text) {
  if (text.empty()) return true;
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7F || c == '"' || c == '=' || c == '\\') return true;
  }
  return false;
}

void AppendTextValue(absl::string_view text, std::string* out) {
  if (!TextNeedsQuotes(text)) {
    out->append(text.data(), text.size());
    return;
  }
  out->push_back('"');
  for (char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    // UTF-8 text stays readable; only control bytes are escaped.
    if (!AppendShortEscape(c, out)) {
      if (c < 0x20 || c == 0x7F) {
        absl::StrAppendFormat(out, "\\x%02x", c);
      } else {
        out->push_back(ch);
      }
    }
  }
  out->push_back('"');
}

std::string TimeText(absl::Time time) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", time, absl::UTCTimeZone());
}

}  // namespace

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not a log level: debug, info, warning or error"));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a log format: text or json"));
}

void SetLogLevel(LogLevel level) {
  log_internal::min_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

void SetLogFormat(LogFormat format) {
  log_format.store(static_cast<int>(format), std::memory_order_relaxed);
}

void SetLogFd(int fd) { log_fd.store(fd, std::memory_order_relaxed); }

std::string FormatLogLine(LogFormat format, absl::Time time, LogLevel level,
                          absl::string_view event,
                          const std::vector<std::pair<std::string, LogValue>>& fields) {
  std::string line;
  line.reserve(128);
  if (format == LogFormat::kJson) {
    absl::StrAppend(&line, "{\"time\":\"", TimeText(time), "\",\"level\":\"", JsonLevel(level),
                    "\",\"event\":");
    AppendJsonString(event, &line);
    for (const auto& [key, value] : fields) {
      line.push_back(',');
      AppendJsonString(key, &line);
      line.push_back(':');
      if (value.kind == LogValue::Kind::kString) {
        AppendJsonString(value.text, &line);
      } else {
        line += value.text;
      }
    }
    line += "}\n";
    return line;
  }
  absl::StrAppend(&line, TimeText(time), " ", TextLevel(level), " ");
  AppendTextValue(event, &line);
  for (const auto& [key, value] : fields) {
    line.push_back(' ');
    AppendTextValue(key, &line);
    line.push_back('=');
    AppendTextValue(value.text, &line);
  }
  line.push_back('\n');
  return line;
}

void WriteLogLine(absl::string_view line) {
  // One write(2) per line; the mutex keeps a rare partial write's remainder next to its start.
  static std::mutex* const mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  const int fd = log_fd.load(std::memory_order_relaxed);
  while (!line.empty()) {
    const ssize_t written = ::write(fd, line.data(), line.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere to report a failing log
    }
    line.remove_prefix(static_cast<size_t>(written));
  }
}

LogEvent::LogEvent(LogLevel level, absl::string_view event) : level_(level), event_(event) {}

LogEvent::~LogEvent() {
  WriteLogLine(FormatLogLine(static_cast<LogFormat>(log_format.load(std::memory_order_relaxed)),
                             absl::Now(), level_, event_, fields_));
}

LogEvent& LogEvent::Field(absl::string_view key, absl::string_view value) {
  fields_.emplace_back(std::string(key), LogValue{LogValue::Kind::kString, std::string(value)});
  return *this;
}

LogEvent& LogEvent::Field(absl::string_view key, bool value) {
  fields_.emplace_back(std::string(key), LogValue{LogValue::Kind::kBool, value ? "true" : "false"});
  return *this;
}

LogEvent& LogEvent::Field(absl::string_view key, long long value) {
  fields_.emplace_back(std::string(key), LogValue{LogValue::Kind::kNumber, absl::StrCat(value)});
  return *this;
}

LogEvent& LogEvent::Field(absl::string_view key, unsigned long long value) {
  fields_.emplace_back(std::string(key), LogValue{LogValue::Kind::kNumber, absl::StrCat(value)});
  return *this;
}

LogEvent& LogEvent::Field(absl::string_view key, double value) {
  std::string text = "null";
  if (std::isfinite(value)) {
    text = absl::StrFormat("%.3f", value);
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
    if (text == "-0") text = "0";
  }
  fields_.emplace_back(std::string(key), LogValue{LogValue::Kind::kNumber, std::move(text)});
  return *this;
}

LogEvent& LogEvent::Status(const absl::Status& status) {
  Field("code", absl::StatusCodeToString(status.code()));
  if (!status.ok()) Field("error", status.message());
  return *this;
}

}  // namespace kvserve
