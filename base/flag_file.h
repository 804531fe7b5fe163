// ReadFlagFile: the whole contents of a file a command-line flag names (TLS material, an auth
// token list, a chat template), for the binaries' options. The one reader, so every flag says
// the same thing when its file is missing or empty.
//
// Thread-safety: a plain function.
#ifndef KVSERVE_BASE_FLAG_FILE_H_
#define KVSERVE_BASE_FLAG_FILE_H_

#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kvserve {

// `flag` as written on the command line, e.g. "--tls_cert". INVALID_ARGUMENT
// "--tls_cert: cannot read 'PATH'" when the file cannot be opened, "...: 'PATH' is empty" when
// it holds nothing.
inline absl::StatusOr<std::string> ReadFlagFile(absl::string_view flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream contents;
  contents << in.rdbuf();
  if (contents.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is empty"));
  }
  return contents.str();
}

}  // namespace kvserve

#endif  // KVSERVE_BASE_FLAG_FILE_H_
