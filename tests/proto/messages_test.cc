// Round trips of every kind of kvserve.v1 message through the binary wire format and JSON (what
// grpcurl users send), and the default semantics documented in the .proto files: unset optional
// fields are distinguishable from zero, zero scalars mean "default", oneofs hold one input.
#include <cmath>
#include <limits>
#include <string>

#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/kv_events.pb.h"
#include "kvserve/v1/output.pb.h"
#include "kvserve/v1/sampling.pb.h"
#include "kvserve/v1/worker.pb.h"

namespace kvserve::v1 {
namespace {

using google::protobuf::util::MessageDifferencer;

// Serializes `message`, parses the bytes into a fresh message and returns it.
template <typename Message>
Message RoundTrip(const Message& message) {
  std::string wire;
  EXPECT_TRUE(message.SerializeToString(&wire));
  Message parsed;
  EXPECT_TRUE(parsed.ParseFromString(wire));
  return parsed;
}

template <typename Message>
Message FromJson(const std::string& json) {
  Message message;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &message);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << json;
  return message;
}

TEST(SamplingParamsTest, UnsetOptionalsAreDistinctFromZeroAfterRoundTrip) {
  SamplingParams unset;
  SamplingParams zeros;
  zeros.set_temperature(0.0f);  // greedy
  zeros.set_seed(0);            // an ordinary seed
  zeros.set_logprobs(0);        // chosen token's logprob only

  const SamplingParams unset_parsed = RoundTrip(unset);
  const SamplingParams zeros_parsed = RoundTrip(zeros);
  EXPECT_FALSE(unset_parsed.has_temperature());
  EXPECT_FALSE(unset_parsed.has_seed());
  EXPECT_FALSE(unset_parsed.has_logprobs());
  EXPECT_FALSE(unset_parsed.has_top_p());
  EXPECT_FALSE(unset_parsed.has_repetition_penalty());
  EXPECT_TRUE(zeros_parsed.has_temperature());
  EXPECT_TRUE(zeros_parsed.has_seed());
  EXPECT_TRUE(zeros_parsed.has_logprobs());
  EXPECT_EQ(zeros_parsed.temperature(), 0.0f);
  // Explicit zeros cost bytes on the wire; unset fields cost none.
  EXPECT_EQ(unset.ByteSizeLong(), 0u);
  EXPECT_GT(zeros.ByteSizeLong(), 0u);
}

TEST(SamplingParamsTest, ZeroScalarsMeanDefaultsAndAreNotSent) {
  SamplingParams params;
  EXPECT_EQ(params.top_k(), 0);       // no top-k filter
  EXPECT_EQ(params.min_p(), 0.0f);    // no min-p filter
  EXPECT_EQ(params.max_tokens(), 0);  // server default
  EXPECT_EQ(params.n(), 0);           // one choice
  EXPECT_FALSE(params.ignore_eos());
  params.set_top_k(0);
  params.set_max_tokens(0);
  EXPECT_EQ(params.ByteSizeLong(), 0u);
}

TEST(SamplingParamsTest, EveryFieldSurvivesRoundTrip) {
  SamplingParams params;
  params.set_temperature(0.7f);
  params.set_top_k(40);
  params.set_top_p(0.9f);
  params.set_min_p(0.05f);
  params.set_repetition_penalty(1.1f);
  params.set_presence_penalty(-0.5f);
  params.set_frequency_penalty(1.5f);
  params.set_seed(std::numeric_limits<uint64_t>::max());
  params.set_max_tokens(128);
  params.add_stop("\n\n");
  params.add_stop("</answer>");
  params.add_stop_token_ids(2);
  params.set_ignore_eos(true);
  params.set_include_stop_str_in_output(true);
  params.set_logprobs(5);
  params.set_n(3);
  params.set_detokenize_special_tokens(true);
  const SamplingParams parsed = RoundTrip(params);
  EXPECT_TRUE(MessageDifferencer::Equals(params, parsed)) << parsed.DebugString();
  EXPECT_EQ(parsed.seed(), std::numeric_limits<uint64_t>::max());
  ASSERT_EQ(parsed.stop_size(), 2);
  EXPECT_EQ(parsed.stop(1), "</answer>");
}

TEST(GenerateRequestTest, InputOneofHoldsExactlyOneKind) {
  GenerateRequest request;
  EXPECT_EQ(request.input_case(), GenerateRequest::INPUT_NOT_SET);
  request.set_prompt("Once upon a time");
  EXPECT_EQ(request.input_case(), GenerateRequest::kPrompt);
  request.mutable_prompt_token_ids()->add_ids(1);
  EXPECT_EQ(request.input_case(), GenerateRequest::kPromptTokenIds);
  EXPECT_FALSE(request.has_prompt());  // setting another member cleared the text
  ChatMessage* message = request.mutable_chat()->add_messages();
  message->set_role("user");
  message->set_content("Hello");
  EXPECT_EQ(request.input_case(), GenerateRequest::kChat);
  EXPECT_FALSE(request.has_prompt_token_ids());

  const GenerateRequest parsed = RoundTrip(request);
  ASSERT_EQ(parsed.input_case(), GenerateRequest::kChat);
  ASSERT_EQ(parsed.chat().messages_size(), 1);
  EXPECT_EQ(parsed.chat().messages(0).role(), "user");
  EXPECT_EQ(parsed.chat().messages(0).content(), "Hello");
}

TEST(GenerateRequestTest, EmptyTokenIdsAndEmptyPromptAreStillASetInput) {
  // An empty prompt is an input the server refuses by name, not a missing input.
  GenerateRequest empty_ids;
  empty_ids.mutable_prompt_token_ids();
  EXPECT_EQ(RoundTrip(empty_ids).input_case(), GenerateRequest::kPromptTokenIds);
  GenerateRequest empty_text;
  empty_text.set_prompt("");
  EXPECT_EQ(RoundTrip(empty_text).input_case(), GenerateRequest::kPrompt);
}

TEST(GenerateRequestTest, ControlsAndSamplingPresenceSurviveRoundTrip) {
  GenerateRequest request;
  request.set_prompt("x");
  GenerateRequest parsed = RoundTrip(request);
  EXPECT_FALSE(parsed.has_add_special_tokens());  // default depends on the input kind
  EXPECT_FALSE(parsed.has_add_generation_prompt());
  EXPECT_FALSE(parsed.has_sampling());  // every sampling default

  request.set_request_id("req-1");
  request.set_add_special_tokens(false);
  request.set_add_generation_prompt(false);
  request.mutable_sampling()->set_max_tokens(16);
  request.set_priority(-7);
  parsed = RoundTrip(request);
  ASSERT_TRUE(parsed.has_add_special_tokens());
  EXPECT_FALSE(parsed.add_special_tokens());
  ASSERT_TRUE(parsed.has_add_generation_prompt());
  EXPECT_FALSE(parsed.add_generation_prompt());
  ASSERT_TRUE(parsed.has_sampling());
  EXPECT_EQ(parsed.sampling().max_tokens(), 16);
  EXPECT_EQ(parsed.priority(), -7);
  EXPECT_EQ(parsed.request_id(), "req-1");
}

TEST(GenerateRequestTest, JsonAsGrpcurlSendsItKeepsExplicitZeros) {
  const auto request = FromJson<GenerateRequest>(
      R"({"prompt": "hi", "sampling": {"temperature": 0, "maxTokens": 8, "seed": "0",
          "stop": ["\n"]}})");
  EXPECT_EQ(request.prompt(), "hi");
  ASSERT_TRUE(request.sampling().has_temperature());
  EXPECT_EQ(request.sampling().temperature(), 0.0f);
  ASSERT_TRUE(request.sampling().has_seed());
  EXPECT_EQ(request.sampling().max_tokens(), 8);
  EXPECT_FALSE(request.sampling().has_top_p());

  const auto chat = FromJson<GenerateRequest>(
      R"({"chat": {"messages": [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Hi"}]},
          "addGenerationPrompt": true})");
  ASSERT_EQ(chat.input_case(), GenerateRequest::kChat);
  EXPECT_EQ(chat.chat().messages(1).content(), "Hi");
  EXPECT_TRUE(chat.has_add_generation_prompt());

  const auto ids = FromJson<GenerateRequest>(R"({"promptTokenIds": {"ids": [1, 2, 3]}})");
  ASSERT_EQ(ids.prompt_token_ids().ids_size(), 3);
  EXPECT_EQ(ids.prompt_token_ids().ids(2), 3);
}

TEST(GenerateResponseTest, ChoicesLogprobsFinishAndUsageSurviveRoundTrip) {
  GenerateResponse response;
  response.set_request_id("req-2");
  ChoiceDelta* first = response.add_choices();
  first->set_index(0);
  first->add_token_ids(42);
  first->add_token_ids(7);
  first->set_text(" world\xE2\x9C\x93");  // valid UTF-8: a check mark
  for (int token : {42, 7}) {
    PositionLogprobs* position = first->add_logprobs();
    position->mutable_chosen()->set_token_id(token);
    position->mutable_chosen()->set_logprob(-0.25f);
    position->mutable_chosen()->set_rank(1);
    TokenLogprob* alternative = position->add_top();
    alternative->set_token_id(token + 1);
    alternative->set_logprob(-std::numeric_limits<float>::infinity());
    alternative->set_rank(2);
  }
  first->set_finish_reason(FINISH_REASON_STOP);
  first->set_stop_token_id(0);  // a oneof member set to zero is still set
  ChoiceDelta* second = response.add_choices();
  second->set_index(1);
  second->set_finish_reason(FINISH_REASON_STOP_STRING);
  second->set_stop_string("\n\n");
  response.mutable_usage()->set_prompt_tokens(12);
  response.mutable_usage()->set_completion_tokens(9);
  response.mutable_usage()->set_cached_prompt_tokens(0);

  const GenerateResponse parsed = RoundTrip(response);
  EXPECT_TRUE(MessageDifferencer::Equals(response, parsed)) << parsed.DebugString();
  ASSERT_EQ(parsed.choices_size(), 2);
  EXPECT_EQ(parsed.choices(0).stop_reason_case(), ChoiceDelta::kStopTokenId);
  EXPECT_EQ(parsed.choices(0).stop_token_id(), 0);
  EXPECT_EQ(parsed.choices(1).stop_reason_case(), ChoiceDelta::kStopString);
  EXPECT_TRUE(std::isinf(parsed.choices(0).logprobs(1).top(0).logprob()));
  EXPECT_TRUE(parsed.has_usage());
}

TEST(GenerateResponseTest, IntermediateMessageHasNoUsageAndUnfinishedChoice) {
  GenerateResponse response;
  ChoiceDelta* delta = response.add_choices();
  delta->add_token_ids(5);
  const GenerateResponse parsed = RoundTrip(response);
  EXPECT_FALSE(parsed.has_usage());
  EXPECT_EQ(parsed.choices(0).finish_reason(), FINISH_REASON_UNSPECIFIED);
  EXPECT_EQ(parsed.choices(0).stop_reason_case(), ChoiceDelta::STOP_REASON_NOT_SET);
}

TEST(TokenLogprobTest, TokenBytesCarryAnIncompleteUtf8Character) {
  // The first two bytes of a three-byte character: what a byte-level BPE token can hold.
  const std::string partial("\xE2\x9C", 2);
  TokenLogprob logprob;
  logprob.set_token_bytes(partial);
  EXPECT_EQ(RoundTrip(logprob).token_bytes(), partial);
  TokenizeResponse tokenized;
  tokenized.add_token_bytes(partial);
  EXPECT_EQ(RoundTrip(tokenized).token_bytes(0), partial);
}

TEST(TokenizeTest, RequestsAndResponsesSurviveRoundTrip) {
  TokenizeRequest request;
  request.mutable_chat()->add_messages()->set_role("user");
  request.set_return_token_bytes(true);
  const TokenizeRequest parsed = RoundTrip(request);
  EXPECT_EQ(parsed.input_case(), TokenizeRequest::kChat);
  EXPECT_FALSE(parsed.has_add_generation_prompt());

  TokenizeResponse response;
  response.add_token_ids(1);
  response.add_token_bytes("<|im_start|>");
  response.set_rendered_prompt("<|im_start|>user\n");
  EXPECT_TRUE(MessageDifferencer::Equals(response, RoundTrip(response)));

  DetokenizeRequest detokenize;
  detokenize.add_token_ids(49151);
  detokenize.set_detokenize_special_tokens(true);
  EXPECT_TRUE(MessageDifferencer::Equals(detokenize, RoundTrip(detokenize)));
}

TEST(ModelInfoTest, BosIdZeroIsDistinctFromNoBos) {
  ModelInfo info;
  info.set_name("SmolLM2-135M-Instruct");
  info.set_architecture("llama");
  info.set_vocab_size(49152);
  info.set_context_length(8192);
  info.set_kv_block_size(16);
  info.add_eos_token_ids(2);
  info.set_chat_template_format("chatml");
  info.mutable_limits()->set_max_n(8);
  EXPECT_FALSE(RoundTrip(info).has_bos_token_id());
  info.set_bos_token_id(0);
  const ModelInfo parsed = RoundTrip(info);
  ASSERT_TRUE(parsed.has_bos_token_id());
  EXPECT_EQ(parsed.bos_token_id(), 0);
  EXPECT_TRUE(MessageDifferencer::Equals(info, parsed));
}

}  // namespace
}  // namespace kvserve::v1
