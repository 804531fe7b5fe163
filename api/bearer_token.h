// The one reading of an "Authorization" header (gRPC metadata or HTTP header) as a bearer token,
// exactly as RFC 6750 section 2.1 writes it: "Bearer" 1*SP b64token, where
// b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=". The scheme is
// case-insensitive (RFC 7235 section 2.1); no other whitespace, before or after, is allowed (a
// token with a trailing space is refused). The router (router/token_auth.h) and the worker's
// HTTP API (worker/http_backend.h) both authenticate through it, so they accept the same tokens.
//
// Thread-safety: pure function.
#ifndef KVSERVE_API_BEARER_TOKEN_H_
#define KVSERVE_API_BEARER_TOKEN_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvserve {

// The token of `authorization` (a view into it); UNAUTHENTICATED saying what is wrong otherwise.
absl::StatusOr<absl::string_view> ParseBearerToken(absl::string_view authorization);

}  // namespace kvserve

#endif  // KVSERVE_API_BEARER_TOKEN_H_
