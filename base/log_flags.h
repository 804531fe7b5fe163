// The logging flags every kvserve server takes, defined once here (not in each main.cc):
//   --log_level=debug|info|warning|error   (default info)
//   --log_format=text|json                 (default text)
// A binary links kvserve_log_flags and calls ApplyLogFlags() after absl::ParseCommandLine.
//
// Thread-safety: call once, at the start of main.
#ifndef KVSERVE_BASE_LOG_FLAGS_H_
#define KVSERVE_BASE_LOG_FLAGS_H_

#include "absl/status/status.h"

namespace kvserve {

// Sets the log level and format from the flags. INVALID_ARGUMENT naming the flag otherwise
// ("--log_level: 'x' is not a log level: ...").
absl::Status ApplyLogFlags();

}  // namespace kvserve

#endif  // KVSERVE_BASE_LOG_FLAGS_H_
