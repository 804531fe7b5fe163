// RequestProgress: what a resubmission carries after a worker failed (the route's context and
// budget, each unfinished choice's tokens and text bytes), the KV source a routing decision
// planned, and how worker messages are rewritten for the client (request id, usage over every
// call).
#include "router/request_progress.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

ProxiedRequest Request(int n) {
  ProxiedRequest request;
  request.client_request_id = "client-1";
  request.router_request_id = "router-r1";
  request.prompt_token_ids = {1, 2, 3, 4, 5};
  request.sampling.set_max_tokens(10);
  request.sampling.set_n(n);
  request.sampling.set_seed(7);
  request.cache_salt = "salt";
  request.context_length = 100;
  return request;
}

v1::GenerateResponse Delta(int index, std::vector<int32_t> tokens, const std::string& text,
                           v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED) {
  v1::GenerateResponse response;
  response.set_request_id("router-r1");
  v1::ChoiceDelta* delta = response.add_choices();
  delta->set_index(index);
  delta->mutable_token_ids()->Add(tokens.begin(), tokens.end());
  delta->set_text(text);
  delta->set_finish_reason(finish);
  return response;
}

TEST(RequestProgressTest, OneChoiceResubmitsItsGeneratedTokensAsContext) {
  const ProxiedRequest request = Request(1);
  RequestProgress progress(&request);
  v1::GenerateResponse response = Delta(0, {10, 11, 12}, "abc");
  EXPECT_EQ(progress.Apply(&response), RequestProgress::MessageKind::kOutput);
  EXPECT_EQ(response.request_id(), "client-1");

  const RouteRequest route = progress.RouteFor({"w1"});
  EXPECT_EQ(route.tokens, (std::vector<TokenId>{1, 2, 3, 4, 5, 10, 11, 12}));
  EXPECT_EQ(route.max_tokens, 7);
  EXPECT_EQ(route.num_choices, 1);
  EXPECT_TRUE(route.prefer_longest_prefix);
  EXPECT_EQ(route.excluded_workers, std::vector<std::string>{"w1"});
  EXPECT_EQ(route.cache_salt, "salt");

  const v1::WorkerGenerateRequest call = progress.WorkerRequest(RoutingDecision{});
  EXPECT_EQ(call.request_id(), "router-r1");
  EXPECT_EQ(call.prompt_token_ids_size(), 5);
  EXPECT_EQ(call.sampling().seed(), 7u);
  ASSERT_EQ(call.choices_size(), 1);
  EXPECT_EQ(call.choices(0).generated_token_ids_size(), 3);
  EXPECT_EQ(call.choices(0).emitted_text_bytes(), 3);
}

TEST(RequestProgressTest, FinishedChoicesAreNotResubmitted) {
  const ProxiedRequest request = Request(2);
  RequestProgress progress(&request);
  v1::GenerateResponse first = Delta(0, {10}, "x", v1::FINISH_REASON_STOP);
  progress.Apply(&first);
  v1::GenerateResponse second = Delta(1, {20, 21}, "yz");
  progress.Apply(&second);
  EXPECT_FALSE(progress.all_finished());
  const RouteRequest route = progress.RouteFor({});
  EXPECT_EQ(route.tokens.size(), 5u) << "with n > 1 only the shared prompt is context";
  EXPECT_EQ(route.num_choices, 1);
  EXPECT_FALSE(route.prefer_longest_prefix);
  const v1::WorkerGenerateRequest call = progress.WorkerRequest(RoutingDecision{});
  ASSERT_EQ(call.choices_size(), 1);
  EXPECT_EQ(call.choices(0).index(), 1);
  EXPECT_EQ(call.choices(0).generated_token_ids_size(), 2);
}

TEST(RequestProgressTest, PromptLogprobsReachTheClientExactlyOnceAcrossAMigration) {
  ProxiedRequest request = Request(1);
  request.sampling.set_prompt_logprobs(2);
  RequestProgress progress(&request);
  // Failed before sending anything: the next worker is still asked for them.
  EXPECT_EQ(progress.WorkerRequest(RoutingDecision{}).sampling().prompt_logprobs(), 2);
  EXPECT_TRUE(progress.WorkerRequest(RoutingDecision{}).sampling().has_prompt_logprobs());

  v1::GenerateResponse first = Delta(0, {10}, "a");
  for (int i = 0; i < 5; ++i) first.add_prompt_logprobs()->mutable_chosen()->set_token_id(i + 1);
  progress.Apply(&first);
  EXPECT_EQ(first.prompt_logprobs_size(), 5) << "the first ones pass through";
  // The worker failed after them: the resubmission does not ask again...
  EXPECT_FALSE(progress.WorkerRequest(RoutingDecision{}).sampling().has_prompt_logprobs());
  EXPECT_EQ(progress.WorkerRequest(RoutingDecision{}).sampling().seed(), 7u);
  // ...and a worker that sends them anyway does not reach the client twice.
  v1::GenerateResponse again = Delta(0, {11}, "b");
  again.add_prompt_logprobs();
  progress.Apply(&again);
  EXPECT_EQ(again.prompt_logprobs_size(), 0);
  EXPECT_EQ(again.choices(0).token_ids_size(), 1);
}

TEST(RequestProgressTest, AWorkerRequestCarriesTheKvSourceItsDecisionPlanned) {
  const ProxiedRequest request = Request(1);
  RequestProgress progress(&request);
  RoutingDecision decision;
  decision.worker_id = "10.0.0.2:50061";
  EXPECT_FALSE(progress.WorkerRequest(decision).has_kv_source()) << "no transfer planned";
  decision.transfer_source = "10.0.0.1:50061";
  decision.transfer_source_blocks = 24;
  decision.transfer_blocks = 20;
  const v1::WorkerGenerateRequest call = progress.WorkerRequest(decision);
  ASSERT_TRUE(call.has_kv_source());
  EXPECT_EQ(call.kv_source().address(), "10.0.0.1:50061");
  EXPECT_EQ(call.kv_source().num_blocks(), 24) << "the source's match, not the blocks to move";
}

TEST(RequestProgressTest, UsageCountsEveryCallAndTheOriginalPrompt) {
  const ProxiedRequest request = Request(1);
  RequestProgress progress(&request);
  v1::GenerateResponse before = Delta(0, {10, 11}, "ab");
  progress.Apply(&before);  // the first worker, which then failed
  v1::GenerateResponse last = Delta(0, {12}, "c", v1::FINISH_REASON_LENGTH);
  last.mutable_usage()->set_prompt_tokens(7);  // the second worker's prompt: prompt + generated
  last.mutable_usage()->set_completion_tokens(1);
  last.mutable_usage()->set_cached_prompt_tokens(99);
  EXPECT_EQ(progress.Apply(&last), RequestProgress::MessageKind::kLast);
  EXPECT_EQ(last.usage().prompt_tokens(), 5);
  EXPECT_EQ(last.usage().completion_tokens(), 3);
  EXPECT_EQ(last.usage().cached_prompt_tokens(), 5) << "capped at the prompt";
  EXPECT_TRUE(progress.all_finished());
}

TEST(RequestProgressTest, AProgressReportIsNotOutput) {
  const ProxiedRequest request = Request(1);
  RequestProgress progress(&request);
  v1::GenerateResponse report;
  report.set_request_id("router-r1");
  report.mutable_prefill_progress()->set_computed_tokens(4);
  EXPECT_EQ(progress.Apply(&report), RequestProgress::MessageKind::kProgress);
  // Nothing recorded: the resubmission and the usage are as if it never came.
  EXPECT_EQ(progress.RouteFor({}).tokens.size(), 5u);
  EXPECT_EQ(progress.WorkerRequest(RoutingDecision{}).choices(0).generated_token_ids_size(), 0);
  EXPECT_FALSE(progress.UsageOnlyEnding().has_value());

  // Output that (oddly) comes with a report is output, and the report is not forwarded.
  v1::GenerateResponse both = Delta(0, {10}, "a");
  both.mutable_prefill_progress()->set_computed_tokens(5);
  EXPECT_EQ(progress.Apply(&both), RequestProgress::MessageKind::kOutput);
  EXPECT_FALSE(both.has_prefill_progress());
  EXPECT_EQ(both.request_id(), "client-1");
}

TEST(RequestProgressTest, OnlyARequestWhoseChoicesAllFinishedMayEndWithUsageAlone) {
  const ProxiedRequest request = Request(1);
  RequestProgress progress(&request);
  EXPECT_FALSE(progress.UsageOnlyEnding().has_value());
  v1::GenerateResponse some = Delta(0, {10}, "a");
  progress.Apply(&some);
  EXPECT_FALSE(progress.UsageOnlyEnding().has_value());
  v1::GenerateResponse done = Delta(0, {11}, "b", v1::FINISH_REASON_STOP);
  progress.Apply(&done);
  const std::optional<v1::GenerateResponse> ending = progress.UsageOnlyEnding();
  ASSERT_TRUE(ending.has_value());
  EXPECT_EQ(ending->request_id(), "client-1");
  EXPECT_EQ(ending->usage().prompt_tokens(), 5);
  EXPECT_EQ(ending->usage().completion_tokens(), 2);
  EXPECT_EQ(ending->choices_size(), 0);
}

}  // namespace
}  // namespace kvserve
