#include "base/log_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/log.h"

ABSL_FLAG(std::string, log_level, "info",
          "Least severe log events written to stderr: debug, info, warning or error");
ABSL_FLAG(std::string, log_format, "text",
          "Log lines as text (time LEVEL event key=value ...) or json (one object per line)");

namespace kvserve {

absl::Status ApplyLogFlags() {
  absl::StatusOr<LogLevel> level = ParseLogLevel(absl::GetFlag(FLAGS_log_level));
  if (!level.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--log_level: ", level.status().message()));
  }
  absl::StatusOr<LogFormat> format = ParseLogFormat(absl::GetFlag(FLAGS_log_format));
  if (!format.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--log_format: ", format.status().message()));
  }
  SetLogLevel(*level);
  SetLogFormat(*format);
  return absl::OkStatus();
}

}  // namespace kvserve
