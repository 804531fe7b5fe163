// The identity of this kvserve build: the version of CMake's project() and the commit of the
// source tree it was built from. Both live in a file the build generates
// (cmake/BuildInfo.cmake writes <build>/base/build_info.cc at every build and rewrites it only
// when they changed), so a new commit recompiles that one file and relinks.
//
// What --version prints on every kvserve binary (api/program_usage.h), what ModelInfo's
// server_version says, and the labels of the kvserve_build_info gauge (docs/metrics.md).
//
// Thread-safety: constants.
#ifndef KVSERVE_BASE_BUILD_INFO_H_
#define KVSERVE_BASE_BUILD_INFO_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve {

// "0.1.0": project(kvserve VERSION ...) of the top CMakeLists.txt.
const char* KvserveVersion();
// The abbreviated commit hash, with "-dirty" when tracked files differ from it; "unknown" when
// the sources are not a git checkout.
const char* KvserveCommit();

// "kvserve 0.1.0 (commit d19bb9b)".
inline std::string KvserveVersionString() {
  return absl::StrCat("kvserve ", KvserveVersion(), " (commit ", KvserveCommit(), ")");
}

}  // namespace kvserve

#endif  // KVSERVE_BASE_BUILD_INFO_H_
