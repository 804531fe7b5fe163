#include "router/token_auth.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/bearer_token.h"
#include "base/status_macros.h"

namespace kvserve {
absl::StatusOr<TokenAuth> TokenAuth::Parse(absl::string_view contents) {
  TokenAuth auth;
  auth.enabled_ = true;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("--auth_tokens_file: line ", line_number,
                                                     ": expected 'token tenant', got ",
                                                     fields.size(), " fields"));
    }
    if (!auth.tenant_of_token_.emplace(fields[0], fields[1]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--auth_tokens_file: line ", line_number, ": token listed twice"));
    }
  }
  if (auth.tenant_of_token_.empty()) {
    return absl::InvalidArgumentError("--auth_tokens_file: no 'token tenant' line");
  }
  return auth;
}

absl::StatusOr<std::string> TokenAuth::Authenticate(bool present,
                                                    absl::string_view authorization) const {
  if (!enabled_) return std::string();
  if (!present) return absl::UnauthenticatedError("missing 'authorization: Bearer <token>'");
  KVSERVE_ASSIGN_OR_RETURN(absl::string_view token, ParseBearerToken(authorization));
  auto it = tenant_of_token_.find(token);
  if (it == tenant_of_token_.end()) return absl::UnauthenticatedError("unknown bearer token");
  return it->second;
}

std::string TokenAuth::CacheSaltFor(absl::string_view tenant) {
  if (tenant.empty()) return std::string();
  // A prefix keeps tenant salts apart from any other salt the system may use later.
  return absl::StrCat("kvserve-tenant:", tenant);
}

std::optional<absl::string_view> AuthorizationOf(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

absl::StatusOr<std::string> AuthenticateCall(const TokenAuth& auth,
                                             const grpc::ServerContextBase& context) {
  const std::optional<absl::string_view> authorization = AuthorizationOf(context);
  return auth.Authenticate(authorization.has_value(), authorization.value_or(""));
}

}  // namespace kvserve
