#include "api/status_conversion.h"

#include <string>

namespace kvserve {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl::StatusCode and grpc::StatusCode both number the canonical codes 0..16 identically.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

std::optional<std::string> LeadingFieldPath(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos || colon == 0) return std::nullopt;
  const absl::string_view path = message.substr(0, colon);
  for (char c : path) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '[' || c == ']';
    if (!ok) return std::nullopt;
  }
  return std::string(path);
}

bool IsCapacityRefusal(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         !LeadingFieldPath(status.message()).has_value();
}

}  // namespace kvserve
