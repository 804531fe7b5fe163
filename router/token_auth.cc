#include "router/token_auth.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvserve {
namespace {

bool IsB64Token(absl::string_view token) {
  size_t i = 0;
  while (i < token.size() && (absl::ascii_isalnum(static_cast<unsigned char>(token[i])) ||
                              absl::StrContains("-._~+/", token[i]))) {
    ++i;
  }
  if (i == 0) return false;
  while (i < token.size() && token[i] == '=') ++i;
  return i == token.size();
}

}  // namespace

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
  // RFC 6750 section 2.1: credentials = "Bearer" 1*SP b64token, where
  // b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=". The scheme is
  // case-insensitive (RFC 7235 section 2.1). No other whitespace, before or after, is allowed.
  constexpr absl::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme) ||
      authorization[kScheme.size()] != ' ') {
    return absl::UnauthenticatedError("authorization: expected 'Bearer <token>'");
  }
  absl::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  if (!IsB64Token(token)) {
    return absl::UnauthenticatedError(
        "authorization: the token must be an RFC 6750 b64token (no spaces or other characters)");
  }
  auto it = tenant_of_token_.find(token);
  if (it == tenant_of_token_.end()) return absl::UnauthenticatedError("unknown bearer token");
  return it->second;
}

std::string TokenAuth::CacheSaltFor(absl::string_view tenant) {
  if (tenant.empty()) return std::string();
  // A prefix keeps tenant salts apart from any other salt the system may use later.
  return absl::StrCat("kvserve-tenant:", tenant);
}

absl::StatusOr<std::string> AuthenticateCall(const TokenAuth& auth,
                                             const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const bool present = it != metadata.end();
  return auth.Authenticate(present,
                           present ? absl::string_view(it->second.data(), it->second.size()) : "");
}

}  // namespace kvserve
