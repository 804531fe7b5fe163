#include "api/status_conversion.h"

#include <gtest/gtest.h>

#include "absl/status/status.h"

namespace kvserve {
namespace {

TEST(StatusConversionTest, CodeAndMessageSurviveTheRoundTrip) {
  for (const absl::Status& status :
       {absl::OkStatus(), absl::InvalidArgumentError("sampling.top_p: must be in (0, 1], got 0"),
        absl::ResourceExhaustedError("waiting queue is full (256 requests)"),
        absl::UnavailableError("worker is draining")}) {
    const grpc::Status converted = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(converted.error_code()), static_cast<int>(status.code()));
    EXPECT_EQ(FromGrpcStatus(converted), status);
  }
}

// A full queue is the server's capacity (the router puts the request back in its own queue); a
// refusal naming a field is the request's own and stays final.
TEST(StatusConversionTest, OnlyARefusalNamingNoFieldIsACapacityRefusal) {
  EXPECT_TRUE(
      IsCapacityRefusal(absl::ResourceExhaustedError("waiting queue is full (256 requests)")));
  EXPECT_FALSE(IsCapacityRefusal(
      absl::ResourceExhaustedError("sampling.max_tokens: the request needs 9 KV blocks (8 prompt "
                                   "tokens) but the pool holds 4")));
  EXPECT_FALSE(IsCapacityRefusal(absl::ResourceExhaustedError(
      "prompt_token_ids: 4096 tokens leave no room in the context window of 2048 tokens")));
  EXPECT_FALSE(IsCapacityRefusal(absl::UnavailableError("waiting queue is full")));
  EXPECT_FALSE(IsCapacityRefusal(absl::OkStatus()));
  EXPECT_EQ(LeadingFieldPath("choices[1].generated_token_ids: out of range"),
            "choices[1].generated_token_ids");
  EXPECT_EQ(LeadingFieldPath("worker w-1: gone"), std::nullopt);  // '-' and ' ' are no path
  EXPECT_EQ(LeadingFieldPath(": nothing before"), std::nullopt);
}

}  // namespace
}  // namespace kvserve
