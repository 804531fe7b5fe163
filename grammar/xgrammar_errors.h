// The one place where xgrammar's exceptions become absl::Status. xgrammar reports bad input and
// broken invariants alike by throwing (std::runtime_error subclasses); grammar/ calls it only
// through CatchXgrammar, so no exception leaves this library.
//
// Thread-safety: stateless.
#ifndef KVSERVE_GRAMMAR_XGRAMMAR_ERRORS_H_
#define KVSERVE_GRAMMAR_XGRAMMAR_ERRORS_H_

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kvserve {

// The message of an xgrammar exception without the "[time] file:line: " prefix its fatal-log
// errors put in what(): std::runtime_error's own what() holds the bare message.
inline std::string XgrammarMessage(const std::exception& error) {
  if (const auto* runtime = dynamic_cast<const std::runtime_error*>(&error)) {
    std::string message = runtime->std::runtime_error::what();
    // A failed internal check reads "Check failed: (cond) is false: reason": keep the reason.
    constexpr char kCheckFailed[] = "Check failed: ";
    constexpr char kIsFalse[] = " is false: ";
    if (message.rfind(kCheckFailed, 0) == 0) {
      if (const size_t end = message.find(kIsFalse); end != std::string::npos) {
        message.erase(0, end + sizeof(kIsFalse) - 1);
      }
    }
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    return message;
  }
  return error.what();
}

// Runs fn(); an exception becomes a Status of `code` whose message starts with `context`.
template <typename Fn>
absl::Status CatchXgrammar(absl::StatusCode code, absl::string_view context, Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
    return absl::OkStatus();
  } catch (const std::exception& error) {
    return absl::Status(code, absl::StrCat(context, ": ", XgrammarMessage(error)));
  } catch (...) {
    return absl::Status(code, absl::StrCat(context, ": unknown error"));
  }
}

}  // namespace kvserve

#endif  // KVSERVE_GRAMMAR_XGRAMMAR_ERRORS_H_
