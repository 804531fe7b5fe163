// Round trips of the internal Worker API messages: a migrated WorkerGenerateRequest, and a
// StreamStatus sequence (snapshot in parts, then event batches) as a router would apply it.
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kvserve/v1/kv_events.pb.h"
#include "kvserve/v1/worker.pb.h"

namespace kvserve::v1 {
namespace {

using google::protobuf::util::MessageDifferencer;

template <typename Message>
Message RoundTrip(const Message& message) {
  std::string wire;
  EXPECT_TRUE(message.SerializeToString(&wire));
  Message parsed;
  EXPECT_TRUE(parsed.ParseFromString(wire));
  return parsed;
}

BlockHash Hash(uint64_t high, uint64_t low) {
  BlockHash hash;
  hash.set_high(high);
  hash.set_low(low);
  return hash;
}

TEST(WorkerGenerateRequestTest, MigrationCarriesEachChoicesProgress) {
  WorkerGenerateRequest request;
  request.set_request_id("router-a/17");
  for (int token : {1, 502, 77, 9}) request.add_prompt_token_ids(token);
  request.mutable_sampling()->set_seed(1234);
  request.mutable_sampling()->set_max_tokens(64);
  request.mutable_sampling()->set_n(3);
  request.set_cache_salt(std::string("\x00\xFFtenant", 8));  // arbitrary bytes
  // Choice 1 finished before the worker died; choices 0 and 2 continue.
  WorkerChoice* choice0 = request.add_choices();
  choice0->set_index(0);
  for (int token : {11, 12, 13}) choice0->add_generated_token_ids(token);
  choice0->set_emitted_text_bytes(9);
  WorkerChoice* choice2 = request.add_choices();
  choice2->set_index(2);
  choice2->add_generated_token_ids(21);

  const WorkerGenerateRequest parsed = RoundTrip(request);
  EXPECT_TRUE(MessageDifferencer::Equals(request, parsed)) << parsed.DebugString();
  EXPECT_EQ(parsed.cache_salt().size(), 8u);
  ASSERT_EQ(parsed.choices_size(), 2);
  // The next token's RNG counter and the remaining budget follow from the carried tokens.
  EXPECT_EQ(parsed.choices(0).generated_token_ids_size(), 3);
  EXPECT_EQ(parsed.sampling().max_tokens() - parsed.choices(1).generated_token_ids_size(), 63);
  ASSERT_TRUE(parsed.sampling().has_seed());
}

TEST(WorkerGenerateRequestTest, FreshChoiceHasNoProgress) {
  WorkerGenerateRequest request;
  request.add_choices()->set_index(0);
  const WorkerGenerateRequest parsed = RoundTrip(request);
  ASSERT_EQ(parsed.choices_size(), 1);
  EXPECT_EQ(parsed.choices(0).generated_token_ids_size(), 0);
  EXPECT_EQ(parsed.choices(0).emitted_text_bytes(), 0);
  EXPECT_TRUE(parsed.cache_salt().empty());
  EXPECT_FALSE(parsed.has_sampling());
}

TEST(BlockHashTest, FullWidthValuesSurviveAndFirstBlockHasNoParent) {
  StoredBlock first;
  *first.mutable_hash() = Hash(std::numeric_limits<uint64_t>::max(), 0);
  first.set_num_tokens(16);
  StoredBlock second;
  *second.mutable_hash() = Hash(0x0123456789ABCDEFull, 0xFEDCBA9876543210ull);
  *second.mutable_parent_hash() = first.hash();
  second.set_num_tokens(16);

  const StoredBlock first_parsed = RoundTrip(first);
  const StoredBlock second_parsed = RoundTrip(second);
  EXPECT_FALSE(first_parsed.has_parent_hash());
  EXPECT_EQ(first_parsed.hash().high(), std::numeric_limits<uint64_t>::max());
  ASSERT_TRUE(second_parsed.has_parent_hash());
  EXPECT_TRUE(MessageDifferencer::Equals(second_parsed.parent_hash(), first.hash()));
  EXPECT_EQ(second_parsed.hash().low(), 0xFEDCBA9876543210ull);
  // fixed64 pairs: every hash costs the same on the wire, whatever its value.
  EXPECT_EQ(Hash(1, 1).ByteSizeLong(), Hash(~0ull, ~0ull).ByteSizeLong());
}

// A router's view of one worker's cache, built only from WorkerStatus messages as the
// kv_events.proto contract describes. Returns false on a gap or an out-of-order part.
class CacheView {
 public:
  bool Apply(const WorkerStatus& status) {
    if (status.has_snapshot()) {
      const KvSnapshot& part = status.snapshot();
      if (part.part_index() == 0) {
        hashes_.clear();
        next_part_ = 0;
      }
      if (part.part_index() != next_part_) return false;
      ++next_part_;
      for (const StoredBlock& block : part.blocks()) hashes_.insert(Key(block.hash()));
      sequence_ = part.sequence();
    }
    for (const KvEventBatch& batch : status.event_batches()) {
      if (batch.sequence() != sequence_ + 1) return false;
      sequence_ = batch.sequence();
      for (const KvEvent& event : batch.events()) {
        switch (event.event_case()) {
          case KvEvent::kStored:
            for (const StoredBlock& block : event.stored().blocks()) {
              hashes_.insert(Key(block.hash()));
            }
            break;
          case KvEvent::kRemoved:
            for (const BlockHash& hash : event.removed().hashes()) hashes_.erase(Key(hash));
            break;
          case KvEvent::kAllCleared:
            hashes_.clear();
            break;
          case KvEvent::EVENT_NOT_SET:
            return false;
        }
      }
    }
    return true;
  }
  const std::set<std::pair<uint64_t, uint64_t>>& hashes() const { return hashes_; }

 private:
  static std::pair<uint64_t, uint64_t> Key(const BlockHash& hash) {
    return {hash.high(), hash.low()};
  }
  std::set<std::pair<uint64_t, uint64_t>> hashes_;
  uint64_t sequence_ = 0;
  int next_part_ = 0;
};

WorkerStatus SnapshotPart(int part_index, bool last, std::vector<uint64_t> lows) {
  WorkerStatus status;
  status.set_epoch(99);
  status.mutable_snapshot()->set_sequence(5);
  status.mutable_snapshot()->set_part_index(part_index);
  status.mutable_snapshot()->set_last_part(last);
  for (uint64_t low : lows) {
    StoredBlock* block = status.mutable_snapshot()->add_blocks();
    *block->mutable_hash() = Hash(7, low);
    block->set_num_tokens(16);
  }
  return status;
}

TEST(WorkerStatusTest, SnapshotPartsThenBatchesRebuildTheCacheAfterRoundTrip) {
  WorkerStatus first = SnapshotPart(0, false, {1, 2});
  first.mutable_identity()->set_worker_id("worker-0");
  first.mutable_identity()->set_model_name("SmolLM2-135M-Instruct");
  first.mutable_identity()->set_tensor_parallel_size(2);
  Capacity* capacity = first.mutable_capacity();
  capacity->set_block_size(16);
  capacity->set_total_blocks(1000);
  capacity->set_free_blocks(600);
  capacity->set_evictable_blocks(3);
  capacity->set_used_blocks(400);
  capacity->set_running_requests(4);
  capacity->set_waiting_requests(1);
  WorkerStatus second = SnapshotPart(1, true, {3});
  WorkerStatus deltas;
  KvEventBatch* batch6 = deltas.add_event_batches();
  batch6->set_sequence(6);
  StoredBlock* stored = batch6->add_events()->mutable_stored()->add_blocks();
  *stored->mutable_hash() = Hash(7, 4);
  *stored->mutable_parent_hash() = Hash(7, 3);
  *batch6->add_events()->mutable_removed()->add_hashes() = Hash(7, 1);
  KvEventBatch* batch7 = deltas.add_event_batches();
  batch7->set_sequence(7);
  *batch7->add_events()->mutable_removed()->add_hashes() = Hash(7, 2);

  CacheView view;
  for (const WorkerStatus* status : {&first, &second, &deltas}) {
    const WorkerStatus parsed = RoundTrip(*status);
    EXPECT_TRUE(MessageDifferencer::Equals(*status, parsed));
    ASSERT_TRUE(view.Apply(parsed));
  }
  const std::set<std::pair<uint64_t, uint64_t>> expected = {{7, 3}, {7, 4}};
  EXPECT_EQ(view.hashes(), expected);
  const WorkerStatus parsed_first = RoundTrip(first);
  EXPECT_EQ(parsed_first.capacity().free_blocks() + parsed_first.capacity().used_blocks(),
            parsed_first.capacity().total_blocks());
  EXPECT_EQ(parsed_first.identity().tensor_parallel_size(), 2);
  EXPECT_FALSE(parsed_first.draining());

  // A batch that skips a sequence number is a gap: the router must resubscribe.
  WorkerStatus gap;
  gap.add_event_batches()->set_sequence(9);
  EXPECT_FALSE(view.Apply(RoundTrip(gap)));
}

TEST(WorkerStatusTest, AllClearedEmptiesTheViewAndNewSnapshotReplacesIt) {
  CacheView view;
  ASSERT_TRUE(view.Apply(SnapshotPart(0, true, {1, 2, 3})));
  WorkerStatus cleared;
  KvEventBatch* batch = cleared.add_event_batches();
  batch->set_sequence(6);
  batch->add_events()->mutable_all_cleared();
  const WorkerStatus parsed = RoundTrip(cleared);
  ASSERT_EQ(parsed.event_batches(0).events(0).event_case(), KvEvent::kAllCleared);
  ASSERT_TRUE(view.Apply(parsed));
  EXPECT_TRUE(view.hashes().empty());
  ASSERT_TRUE(view.Apply(RoundTrip(SnapshotPart(0, true, {8}))));
  EXPECT_EQ(view.hashes().size(), 1u);
  // A snapshot part out of order (part 1 without part 0 after it) is refused.
  CacheView fresh;
  EXPECT_FALSE(fresh.Apply(SnapshotPart(1, true, {1})));
}

}  // namespace
}  // namespace kvserve::v1
