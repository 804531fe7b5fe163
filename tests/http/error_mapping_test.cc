#include "http/error_mapping.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"

namespace kvserve {
namespace {

TEST(ErrorMappingTest, EveryStatusCodeGetsTheHttpStatusAClientExpects) {
  struct Case {
    absl::Status status;
    int http_status;
    const char* type;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("sampling.top_p: must be in (0, 1], got 0"), 400,
       "invalid_request_error"},
      {absl::FailedPreconditionError("no tokenizer"), 400, "invalid_request_error"},
      {absl::ResourceExhaustedError("waiting queue is full (256 requests)"), 429,
       "rate_limit_error"},
      {absl::ResourceExhaustedError("sampling.max_tokens: the request needs 9 KV blocks"), 400,
       "invalid_request_error"},
      {absl::UnauthenticatedError("invalid bearer token"), 401, "authentication_error"},
      {absl::PermissionDeniedError("no"), 403, "permission_error"},
      {absl::NotFoundError("model: 'x' is not served here"), 404, "invalid_request_error"},
      {absl::UnavailableError("worker is draining"), 503, "service_unavailable_error"},
      {absl::DeadlineExceededError("late"), 504, "timeout_error"},
      {absl::InternalError("boom"), 500, "server_error"},
  };
  for (const Case& c : cases) {
    const HttpError error = ToHttpError(c.status);
    EXPECT_EQ(error.http_status, c.http_status) << c.status;
    EXPECT_EQ(error.type, c.type) << c.status;
    // The words of the status; a field the message starts with as the OpenAI request names it.
    const std::string message(c.status.message());
    EXPECT_EQ(error.message, absl::StartsWith(message, "sampling.")
                                 ? message.substr(std::string("sampling.").size())
                                 : message);
  }
}

TEST(ErrorMappingTest, MessagesNameTheOpenAiFieldAsParamDoes) {
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("sampling.max_tokens: must be in [0, 8191], "
                                                   "got 9000"))
                .message,
            "max_tokens: must be in [0, 8191], got 9000");
  EXPECT_EQ(
      ToHttpError(absl::InvalidArgumentError("chat.messages[1]: chat template failed: x")).message,
      "messages[1]: chat template failed: x");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("input: the prompt has 9000 tokens"), "messages")
                .message,
            "messages: the prompt has 9000 tokens");
  EXPECT_EQ(
      ToHttpError(absl::InvalidArgumentError("prompt_token_ids.ids[3]: out of range")).message,
      "prompt[3]: out of range");
  EXPECT_EQ(ToHttpError(absl::UnavailableError("worker is draining: retry")).message,
            "worker is draining: retry");
}

TEST(ErrorMappingTest, ParamIsTheOpenAiNameOfTheFieldTheMessageStartsWith) {
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("sampling.top_p: bad")).param, "top_p");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("sampling.stop[1]: bad")).param, "stop[1]");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("chat.messages[2].role: bad")).param,
            "messages[2].role");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("prompt_token_ids.ids[3]: bad")).param,
            "prompt[3]");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("input: too long"), "messages").param,
            "messages");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("token_ids[0]: bad")).param, "tokens[0]");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("chat.tools[1].name: bad")).param,
            "tools[1].name");
  EXPECT_EQ(
      ToHttpError(absl::InvalidArgumentError("sampling.structured_output: invalid json_schema"))
          .param,
      "response_format");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("temperature: must be a number")).param,
            "temperature");
  EXPECT_FALSE(ToHttpError(absl::InternalError("something broke: badly")).param.has_value());
  EXPECT_FALSE(ToHttpError(absl::InvalidArgumentError("no field here")).param.has_value());
}

TEST(ErrorMappingTest, CodesNameModelNotFoundContextLengthAndRateLimit) {
  EXPECT_EQ(ToHttpError(absl::NotFoundError("model: 'gpt-4' is not served")).code,
            "model_not_found");
  EXPECT_EQ(ToHttpError(absl::NotFoundError("model: 'gpt-4' is not served")).param, "model");
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("input: the prompt has 9000 tokens")).param,
            "prompt");
  EXPECT_EQ(ToHttpError(absl::ResourceExhaustedError("sampling.max_tokens: too many")).code,
            "context_length_exceeded");
  EXPECT_EQ(ToHttpError(absl::ResourceExhaustedError("waiting queue is full")).code,
            "rate_limit_exceeded");
}

TEST(ErrorMappingTest, ErrorJsonHasOpenAisShapeWithNullsForMissingParts) {
  const nlohmann::json json =
      nlohmann::json::parse(ErrorJson(ToHttpError(absl::InternalError("boom"))));
  ASSERT_TRUE(json.contains("error"));
  EXPECT_EQ(json["error"]["message"], "boom");
  EXPECT_EQ(json["error"]["type"], "server_error");
  EXPECT_TRUE(json["error"]["param"].is_null());
  EXPECT_EQ(json["error"]["code"], "internal_error");
}

TEST(ErrorMappingTest, InvalidUtf8InAMessageIsReplacedNotThrown) {
  const std::string body = ErrorJson(ToHttpError(absl::InvalidArgumentError("model: '\xff'")));
  EXPECT_TRUE(nlohmann::json::accept(body));
}

}  // namespace
}  // namespace kvserve
