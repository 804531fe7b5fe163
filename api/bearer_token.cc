#include "api/bearer_token.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

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

absl::StatusOr<absl::string_view> ParseBearerToken(absl::string_view authorization) {
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
  return token;
}

}  // namespace kvserve
