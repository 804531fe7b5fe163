// proto_conversion.h: sampling defaults (unset vs zero), EngineOutput -> GenerateResponse,
// KV event batches grouped by kind in order, and snapshots split into parts.
#include "worker/proto_conversion.h"

#include "gtest/gtest.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

ServingLimits Limits() {
  ServingLimits limits;
  limits.default_max_tokens = 77;
  return limits;
}

TEST(ResolveSampling, UnsetFieldsTakeTheProtoDefaults) {
  const SamplingOptions options = ResolveSampling(v1::SamplingParams(), Limits());
  EXPECT_EQ(options.temperature, 1.0f);
  EXPECT_EQ(options.top_p, 1.0f);
  EXPECT_EQ(options.repetition_penalty, 1.0f);
  EXPECT_EQ(options.max_tokens, 77);
  EXPECT_FALSE(options.logprobs.has_value());
  EXPECT_EQ(ResolveN(v1::SamplingParams()), 1);
}

TEST(ResolveSampling, ZeroIsKeptWhereItMeansSomething) {
  v1::SamplingParams sampling;
  sampling.set_temperature(0.0f);
  sampling.set_logprobs(0);
  sampling.set_seed(0);
  sampling.set_max_tokens(5);
  sampling.set_n(3);
  sampling.add_stop("END");
  sampling.add_stop_token_ids(9);
  const SamplingOptions options = ResolveSampling(sampling, Limits());
  EXPECT_EQ(options.temperature, 0.0f);
  ASSERT_TRUE(options.logprobs.has_value());
  EXPECT_EQ(*options.logprobs, 0);
  EXPECT_EQ(options.seed, 0u);
  EXPECT_EQ(options.max_tokens, 5);
  EXPECT_EQ(options.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(options.stop_token_ids, std::vector<int32_t>{9});
  EXPECT_EQ(ResolveN(sampling), 3);
}

TEST(ResolveSampling, UnsetSeedIsDrawnPerRequest) {
  // Two draws of a 64-bit seed colliding would take ~2^32 tries; equal means no draw happened.
  EXPECT_NE(ResolveSampling(v1::SamplingParams(), Limits()).seed,
            ResolveSampling(v1::SamplingParams(), Limits()).seed);
}

TEST(ToProto, EngineOutputMapsEveryField) {
  EngineOutput output;
  ChoiceOutput& choice = output.choices.emplace_back();
  choice.index = 2;
  choice.token_ids = {7, 8};
  choice.text = "hi";
  choice.finish_reason = FinishReason::kStopString;
  choice.stop_string = "END";
  PositionLogprobsOutput& position = choice.logprobs.emplace_back();
  position.chosen = {7, "h", -0.5f, 1};
  position.top.push_back({8, "x", -1.5f, 2});
  output.usage = Usage{10, 2, 4};
  v1::GenerateResponse response;
  ToProto(output, "client-id", &response);
  EXPECT_EQ(response.request_id(), "client-id");
  ASSERT_EQ(response.choices_size(), 1);
  const v1::ChoiceDelta& delta = response.choices(0);
  EXPECT_EQ(delta.index(), 2);
  EXPECT_EQ(delta.token_ids_size(), 2);
  EXPECT_EQ(delta.text(), "hi");
  EXPECT_EQ(delta.finish_reason(), v1::FINISH_REASON_STOP_STRING);
  EXPECT_EQ(delta.stop_string(), "END");
  EXPECT_EQ(delta.logprobs(0).chosen().logprob(), -0.5f);
  EXPECT_EQ(delta.logprobs(0).top(0).rank(), 2);
  EXPECT_EQ(response.usage().prompt_tokens(), 10);
  EXPECT_EQ(response.usage().cached_prompt_tokens(), 4);
}

TEST(ToProto, PromptLogprobsMapOneEntryPerPromptToken) {
  EngineOutput output;
  output.prompt_logprobs.emplace(2);
  (*output.prompt_logprobs)[0].chosen = {.token_id = 4, .token_bytes = "a"};
  (*output.prompt_logprobs)[1].chosen = {
      .token_id = 5, .token_bytes = "b", .logprob = -1.5f, .rank = 3};
  (*output.prompt_logprobs)[1].top.push_back(
      {.token_id = 9, .token_bytes = "z", .logprob = -0.5f, .rank = 1});
  v1::GenerateResponse response;
  ToProto(output, "r", &response);
  ASSERT_EQ(response.prompt_logprobs_size(), 2);
  EXPECT_EQ(response.prompt_logprobs(0).chosen().token_id(), 4);
  EXPECT_EQ(response.prompt_logprobs(0).chosen().rank(), 0);
  EXPECT_EQ(response.prompt_logprobs(1).chosen().logprob(), -1.5f);
  EXPECT_EQ(response.prompt_logprobs(1).chosen().rank(), 3);
  EXPECT_EQ(response.prompt_logprobs(1).top(0).token_bytes(), "z");
  v1::SamplingParams sampling;
  sampling.set_prompt_logprobs(0);
  EXPECT_EQ(ResolveSampling(sampling, Limits()).prompt_logprobs, 0);
  EXPECT_FALSE(ResolveSampling(v1::SamplingParams(), Limits()).prompt_logprobs.has_value());
}

TEST(ToProto, OutputWithoutUsageHasNone) {
  v1::GenerateResponse response;
  ToProto(EngineOutput(), "r", &response);
  EXPECT_FALSE(response.has_usage());
}

TEST(ToProto, KvEventsAreGroupedByKindInOrder) {
  KvEventBatch batch;
  batch.sequence_number = 5;
  batch.events = {{KvEventKind::kStored, {1, 2}, 3},
                  {KvEventKind::kStored, {3, 4}, 4},
                  {KvEventKind::kRemoved, {5, 6}, 3},
                  {KvEventKind::kStored, {7, 8}, 3}};
  v1::KvEventBatch proto;
  ToProto(batch, 16, &proto);
  EXPECT_EQ(proto.sequence(), 5u);
  ASSERT_EQ(proto.events_size(), 3);
  ASSERT_EQ(proto.events(0).stored().blocks_size(), 2);
  EXPECT_EQ(proto.events(0).stored().blocks(1).hash().low(), 3u);
  EXPECT_EQ(proto.events(0).stored().blocks(1).hash().high(), 4u);
  EXPECT_EQ(proto.events(0).stored().blocks(0).num_tokens(), 16);
  ASSERT_EQ(proto.events(1).removed().hashes_size(), 1);
  EXPECT_EQ(proto.events(1).removed().hashes(0).low(), 5u);
  EXPECT_EQ(proto.events(2).stored().blocks_size(), 1);
}

TEST(SnapshotParts, SplitsIntoNumberedPartsWithTheLastMarked) {
  KvSnapshot snapshot;
  snapshot.sequence_number = 9;
  for (uint64_t i = 0; i < 5; ++i) snapshot.hashes.push_back({i, i});
  const std::vector<v1::KvSnapshot> parts = SnapshotParts(snapshot, 16, 2);
  ASSERT_EQ(parts.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(parts[i].part_index(), i);
    EXPECT_EQ(parts[i].sequence(), 9u);
    EXPECT_EQ(parts[i].last_part(), i == 2);
  }
  EXPECT_EQ(parts[2].blocks_size(), 1);
  EXPECT_EQ(parts[2].blocks(0).hash().low(), 4u);

  const std::vector<v1::KvSnapshot> empty = SnapshotParts(KvSnapshot(), 16, 2);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_TRUE(empty[0].last_part());
  EXPECT_EQ(empty[0].blocks_size(), 0);
}

}  // namespace
}  // namespace kvserve
