// Early returns on error for code that uses absl::Status / absl::StatusOr (STYLE.md: errors are
// values). One spelling for the whole project, instead of the hand-written
// `if (absl::Status s = f(); !s.ok()) return s;` and `if (!x.ok()) return x.status();`.
//
//   KVSERVE_RETURN_IF_ERROR(file.Read(&header));                     // returns the Status
//   KVSERVE_ASSIGN_OR_RETURN(ModelConfig config, ReadConfig(path));  // declares `config`
//   KVSERVE_ASSIGN_OR_RETURN(weights_, Load(config));                // assigns to an lvalue
//
// The enclosing function returns absl::Status or any absl::StatusOr<T>. `lhs` must not contain
// an unparenthesised comma (write a type alias for std::pair<A, B>).
#ifndef KVSERVE_BASE_STATUS_MACROS_H_
#define KVSERVE_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVSERVE_RETURN_IF_ERROR(expr)                                     \
  do {                                                                    \
    if (::absl::Status kvserve_status_ = (expr); !kvserve_status_.ok()) { \
      return kvserve_status_;                                             \
    }                                                                     \
  } while (false)

#define KVSERVE_ASSIGN_OR_RETURN(lhs, expr) \
  KVSERVE_ASSIGN_OR_RETURN_IMPL_(KVSERVE_STATUS_CONCAT_(kvserve_statusor_, __LINE__), lhs, expr)

// Implementation details.
#define KVSERVE_STATUS_CONCAT_INNER_(a, b) a##b
#define KVSERVE_STATUS_CONCAT_(a, b) KVSERVE_STATUS_CONCAT_INNER_(a, b)
#define KVSERVE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = *std::move(statusor)

#endif  // KVSERVE_BASE_STATUS_MACROS_H_
