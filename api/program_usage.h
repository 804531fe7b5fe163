// SetProgramUsage: the usage message and --help configuration every kvserve binary uses.
//
// Abseil's --help lists only flags defined in files whose name matches the program's
// ("kvserve-worker" -> kvserve-worker.cc, ...); our flags live in each binary's main.cc
// (worker/main.cc, router/main.cc, tools/*_main.cc), so --help printed "No flags matched". Here
// --help and --helpshort list the flags of every *main.cc file and the servers' shared logging
// flags (base/log_flags.cc); abseil's own flags, such as --flagfile, stay under --helpfull.
// --version prints "kvserve <version> (commit <sha>)" (base/build_info.h) instead of abseil's
// default. Header-only so that binaries without gRPC can use it; they link kvserve_build_info.
//
// Thread-safety: call once, at the start of main, before ParseCommandLine.
#ifndef KVSERVE_API_PROGRAM_USAGE_H_
#define KVSERVE_API_PROGRAM_USAGE_H_

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "base/build_info.h"

namespace kvserve {

inline void SetProgramUsage(absl::string_view message) {
  absl::SetProgramUsageMessage(message);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "main.cc") || absl::EndsWith(file, "base/log_flags.cc");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [] { return KvserveVersionString() + "\n"; };
  absl::SetFlagsUsageConfig(config);
}

}  // namespace kvserve

#endif  // KVSERVE_API_PROGRAM_USAGE_H_
