// Tests of TokenAuth: the tokens file format, bearer parsing, and per-tenant cache salts.
#include "router/token_auth.h"

#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::StartsWith;

TEST(TokenAuthTest, AuthOffAcceptsEveryoneAsTheAnonymousTenant) {
  TokenAuth auth;
  EXPECT_FALSE(auth.enabled());
  absl::StatusOr<std::string> tenant = auth.Authenticate(false, "");
  KVSERVE_ASSERT_OK(tenant);
  EXPECT_EQ(*tenant, "");
  EXPECT_EQ(TokenAuth::CacheSaltFor(*tenant), "");
}

TEST(TokenAuthTest, KnownBearerTokenNamesItsTenant) {
  absl::StatusOr<TokenAuth> auth =
      TokenAuth::Parse("# comment\n\nalice-secret alice\n  bob-secret\tbob  \n");
  KVSERVE_ASSERT_OK(auth);
  EXPECT_EQ(*auth->Authenticate(true, "Bearer alice-secret"), "alice");
  // The scheme is case-insensitive (RFC 7235 section 2.1; ABNF literals are, RFC 5234).
  EXPECT_EQ(*auth->Authenticate(true, "bearer bob-secret"), "bob");
  EXPECT_EQ(*auth->Authenticate(true, "BEARER bob-secret"), "bob");
  EXPECT_EQ(*auth->Authenticate(true, "Bearer   bob-secret"), "bob");  // 1*SP
}

TEST(TokenAuthTest, MissingMalformedOrUnknownTokenIsUnauthenticated) {
  absl::StatusOr<TokenAuth> auth = TokenAuth::Parse("alice-secret alice\n");
  KVSERVE_ASSERT_OK(auth);
  for (auto [present, value] : {std::pair<bool, const char*>{false, ""},
                                {true, ""},
                                {true, "alice-secret"},
                                {true, "Basic alice-secret"},
                                {true, "Bearer "},
                                {true, "Bearer alice"},
                                {true, "Bearer alice-secret-not"},
                                // RFC 6750 section 2.1: "Bearer" 1*SP b64token, nothing else.
                                {true, "Bearer alice-secret "},
                                {true, "Bearer alice-secret\t"},
                                {true, "Bearer\talice-secret"},
                                {true, " Bearer alice-secret"},
                                {true, "Bearer alice secret"},
                                {true, "Bearer alice-secret\r\n"},
                                {true, "Bearer=alice-secret"}}) {
    absl::StatusOr<std::string> tenant = auth->Authenticate(present, value);
    EXPECT_THAT(tenant, StatusIs(absl::StatusCode::kUnauthenticated)) << value;
  }
}

TEST(TokenAuthTest, BadFileNamesTheFlagAndTheLine) {
  absl::StatusOr<TokenAuth> three_fields = TokenAuth::Parse("a alice\nb bob extra\n");
  EXPECT_THAT(three_fields, StatusIs(absl::StatusCode::kInvalidArgument,
                                     StartsWith("--auth_tokens_file: line 2")));
  absl::StatusOr<TokenAuth> duplicate = TokenAuth::Parse("a alice\na bob\n");
  EXPECT_THAT(duplicate, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(TokenAuth::Parse("# nothing\n"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(TokenAuthTest, TenantsGetDistinctNonEmptySalts) {
  EXPECT_NE(TokenAuth::CacheSaltFor("alice"), TokenAuth::CacheSaltFor("bob"));
  EXPECT_FALSE(TokenAuth::CacheSaltFor("alice").empty());
  EXPECT_EQ(TokenAuth::CacheSaltFor("alice"), TokenAuth::CacheSaltFor("alice"));
}

}  // namespace
}  // namespace kvserve
