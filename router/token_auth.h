// TokenAuth: bearer-token authentication of the router's clients.
//
// The tokens file (--auth_tokens_file) has one "token tenant" pair per line; blank lines and lines
// starting with '#' are skipped. A client sends the metadata "authorization: Bearer <token>"; the
// token names its tenant. The tenant decides the prefix-cache salt the router sends to workers
// (CacheSaltFor), so two tenants never share cached blocks, and a client cannot choose a salt:
// it only ever comes from an authenticated token. With auth off every request is the anonymous
// tenant "" with an empty salt (the shared cache).
//
// kvserve.v1.Generation and kvserve.v1.RouterAdmin check tokens (AuthenticateCall);
// grpc.health.v1 and reflection stay open, so probes need no secret.
//
// Thread-safety: immutable after construction; safe to share.
#ifndef KVSERVE_ROUTER_TOKEN_AUTH_H_
#define KVSERVE_ROUTER_TOKEN_AUTH_H_

#include <grpcpp/server_context.h>

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvserve {

class TokenAuth {
 public:
  // Auth off: every request is accepted as the anonymous tenant.
  TokenAuth() = default;

  // Parses a tokens file's contents. INVALID_ARGUMENT "--auth_tokens_file: line N: ..." for a
  // line that is not exactly two fields, or a token listed twice; also when no token is listed.
  static absl::StatusOr<TokenAuth> Parse(absl::string_view contents);

  bool enabled() const { return enabled_; }

  // The tenant of an "authorization" metadata or header value, read by api/bearer_token.h
  // (RFC 6750 exactly: a token with a trailing space or a stray character is refused). `present` false: the metadata was not
  // sent. UNAUTHENTICATED when auth is on and the header is missing, malformed or names no known
  // token.
  absl::StatusOr<std::string> Authenticate(bool present, absl::string_view authorization) const;

  // The prefix-cache salt of a tenant: empty for the anonymous tenant, otherwise a value that no
  // other tenant's salt equals.
  static std::string CacheSaltFor(absl::string_view tenant);

 private:
  bool enabled_ = false;
  absl::flat_hash_map<std::string, std::string> tenant_of_token_;
};

// A gRPC call's "authorization" metadata; nullopt when it was not sent.
std::optional<absl::string_view> AuthorizationOf(const grpc::ServerContextBase& context);

// The tenant of a gRPC call from its "authorization" metadata (auth.Authenticate); every
// authenticated router service calls this, so all of them accept exactly the same tokens.
absl::StatusOr<std::string> AuthenticateCall(const TokenAuth& auth,
                                             const grpc::ServerContextBase& context);

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_TOKEN_AUTH_H_
