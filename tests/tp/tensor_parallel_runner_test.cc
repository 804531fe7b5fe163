// The control plane of a tensor-parallel group (tp/tensor_parallel_runner.h,
// tp/tp_messages.h), with recording runners instead of models: ranks as threads over a Gloo
// group on loopback. Pins that every follower sees exactly the leader's calls (plans long enough
// to need a second broadcast included), that the KV budget is the smallest rank's, that an idle
// leader keeps its followers within the collective timeout, that Stop ends the followers' loops
// with OK, and that a follower gone fails the leader's next step with UNAVAILABLE.
#include "tp/tensor_parallel_runner.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/comm/comm_test_util.h"
#include "tests/status_matchers.h"
#include "tp/tp_messages.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::AnyOf;

// Records every call; ProfileKvBytes answers `kv_bytes`; Execute samples token 7 for the
// sequences that sample, and fails from call `fail_at` on (1-based; 0: never).
// Initialize "captures" `graphs` decode graphs; BindThread and DropDecodeGraphs are counted.
class RecordingRunner final : public ModelRunner {
 public:
  explicit RecordingRunner(int64_t kv_bytes, int fail_at = 0, int32_t graphs = 0)
      : kv_bytes_(kv_bytes), fail_at_(fail_at), graphs_on_initialize_(graphs) {}

  absl::Status BindThread() override {
    ++binds;
    return absl::OkStatus();
  }
  int32_t num_decode_graphs() const override { return graphs_; }
  void DropDecodeGraphs() override {
    graphs_ = 0;
    ++drops;
  }

  int32_t vocab_size() const override { return 100; }
  int32_t max_context_len() const override { return 1024; }
  std::vector<int32_t> eos_token_ids() const override { return {0}; }
  int64_t KvBytesPerBlock(int32_t block_size) const override { return block_size * 10; }
  absl::StatusOr<int64_t> ProfileKvBytes(const RunnerConfig& /*config*/) override {
    return kv_bytes_;
  }
  absl::Status Initialize(const RunnerConfig& config) override {
    configs.push_back(config);
    graphs_ = graphs_on_initialize_;
    return absl::OkStatus();
  }
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    if (fail_at_ > 0 && static_cast<int>(plans.size()) + 1 >= fail_at_) {
      return absl::InternalError("this rank failed");
    }
    std::string bytes;
    EncodeTpMessage(plan, &bytes);
    plans.push_back(bytes);
    StepResult result;
    for (const ScheduledSequence& seq : plan.sequences) {
      if (!seq.sample) continue;
      SampledToken& token = result.sampled.emplace_back();
      token.id = seq.id;
      token.token = 7;
    }
    return result;
  }

  std::vector<RunnerConfig> configs;
  std::vector<std::string> plans;  // encoded, to compare whole plans
  int binds = 0;
  int drops = 0;

 private:
  const int64_t kv_bytes_;
  const int fail_at_;
  const int32_t graphs_on_initialize_;
  int32_t graphs_ = 0;
};

StepPlan MakePlan(uint64_t step, int32_t num_prompt_tokens) {
  StepPlan plan;
  plan.step_id = step;
  plan.released = {step + 100, step + 200};
  plan.host_copies = {{.to_host = true, .device = 7, .host = 0},
                      {.to_host = false, .device = 2, .host = 11}};
  plan.block_copies = {{.src = 3, .dst = 4}};
  ScheduledSequence fresh;
  fresh.id = step;
  fresh.is_new = true;
  for (int32_t i = 0; i < num_prompt_tokens; ++i) fresh.token_ids.push_back(i % 97);
  fresh.block_ids = {1, 2, 5};
  fresh.num_computed_tokens = 16;
  fresh.sampling.params.temperature = 0.5f;
  fresh.sampling.params.seed = 1234567890123ull;
  fresh.sampling.num_prompt_tokens = num_prompt_tokens;
  fresh.sampling.logprobs = true;
  fresh.num_scheduled_tokens = num_prompt_tokens - 16;
  fresh.sample = true;
  plan.sequences.push_back(fresh);
  ScheduledSequence delta;
  delta.id = 99;
  delta.token_ids = {42};
  delta.num_scheduled_tokens = 1;
  plan.sequences.push_back(delta);
  return plan;
}

TEST(TpMessagesTest, PlanRoundTripsWithEveryField) {
  const StepPlan plan = MakePlan(5, 40);
  std::string bytes;
  EncodeTpMessage(plan, &bytes);
  absl::StatusOr<TpMessage> decoded = DecodeTpMessage(bytes);
  KVSERVE_ASSERT_OK(decoded);
  ASSERT_EQ(decoded->command, TpCommand::kExecute);
  const StepPlan& got = decoded->plan;
  EXPECT_EQ(got.step_id, 5u);
  EXPECT_EQ(got.released, plan.released);
  EXPECT_EQ(got.host_copies, plan.host_copies);
  EXPECT_EQ(got.block_copies, plan.block_copies);
  ASSERT_EQ(got.sequences.size(), 2u);
  EXPECT_TRUE(got.sequences[0].is_new);
  EXPECT_TRUE(got.sequences[0].sample);
  EXPECT_EQ(got.sequences[0].token_ids, plan.sequences[0].token_ids);
  EXPECT_EQ(got.sequences[0].block_ids, plan.sequences[0].block_ids);
  EXPECT_EQ(got.sequences[0].num_computed_tokens, 16);
  EXPECT_EQ(got.sequences[0].num_scheduled_tokens, 24);
  EXPECT_EQ(got.sequences[0].sampling.params.temperature, 0.5f);
  EXPECT_EQ(got.sequences[0].sampling.params.seed, 1234567890123ull);
  EXPECT_EQ(got.sequences[0].sampling.num_prompt_tokens, 40);
  EXPECT_TRUE(got.sequences[0].sampling.logprobs);
  EXPECT_FALSE(got.sequences[1].is_new);
  EXPECT_EQ(got.sequences[1].token_ids, std::vector<TokenId>{42});
  EXPECT_EQ(got.sequences[1].num_scheduled_tokens, 1);
}

TEST(TpMessagesTest, TruncatedOrPaddedBytesAreRefused) {
  std::string bytes;
  EncodeTpMessage(MakePlan(1, 20), &bytes);
  for (size_t size : {size_t{0}, size_t{1}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_THAT(DecodeTpMessage(bytes.substr(0, size)),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << size;
  }
  EXPECT_FALSE(DecodeTpMessage(bytes + "x").ok());
  EXPECT_FALSE(DecodeTpMessage(std::string(1, '\x09')).ok());  // no such command
}

// A group of `size` ranks: rank 0 a TensorParallelRunner over a RecordingRunner, the others
// RunTensorParallelFollower over theirs, each on a thread. A follower whose loop returns drops
// its communicator, as an exiting process would (its connections close).
class Group {
 public:
  // `graphs`: the decode graphs each rank captures at Initialize (empty: none anywhere).
  Group(int size, absl::Duration timeout, absl::Duration keepalive, int follower_fail_at = 0,
        std::vector<int32_t> graphs = {}) {
    graphs.resize(size, 0);
    comms_ = testing::MakeGlooGroup(size, timeout);
    timed_ = std::make_unique<TimedCommunicator>(comms_[0].get());
    auto leader = std::make_unique<RecordingRunner>(1000, 0, graphs[0]);
    leader_runner_ = leader.get();
    leader_ = std::make_unique<TensorParallelRunner>(std::move(leader), comms_[0].get(),
                                                     timed_.get(), keepalive);
    followers_.resize(size - 1);
    status_.resize(size - 1);
    for (int rank = 1; rank < size; ++rank) {
      followers_[rank - 1] =
          std::make_unique<RecordingRunner>(1000 - rank, follower_fail_at, graphs[rank]);
      threads_.emplace_back([this, rank] {
        status_[rank - 1] = RunTensorParallelFollower(*followers_[rank - 1], *comms_[rank]);
        comms_[rank].reset();
      });
    }
  }
  ~Group() { Join(); }

  void Join() {
    for (std::thread& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

  TensorParallelRunner& leader() { return *leader_; }
  RecordingRunner& leader_runner() { return *leader_runner_; }
  RecordingRunner& follower(int rank) { return *followers_[rank - 1]; }
  const absl::Status& follower_status(int rank) { return status_[rank - 1]; }

 private:
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::unique_ptr<TimedCommunicator> timed_;
  RecordingRunner* leader_runner_ = nullptr;
  std::unique_ptr<TensorParallelRunner> leader_;
  std::vector<std::unique_ptr<RecordingRunner>> followers_;
  std::vector<absl::Status> status_;
  std::vector<std::thread> threads_;
};

TEST(TensorParallelRunnerTest, FollowersRunTheLeadersCallsThenStopWithOk) {
  Group group(3, absl::Seconds(30), absl::Seconds(1));
  RunnerConfig config;
  config.max_num_batched_tokens = 64;
  config.max_num_seqs = 4;
  config.max_context_len = 512;
  absl::StatusOr<int64_t> kv_bytes = group.leader().ProfileKvBytes(config);
  KVSERVE_ASSERT_OK(kv_bytes);
  EXPECT_EQ(*kv_bytes, 998);  // the smallest rank's (rank 2)
  RunnerConfig sized = config;
  sized.num_blocks = 62;
  KVSERVE_ASSERT_OK(group.leader().Initialize(sized));
  // The third plan is longer than one frame (5,000 tokens: 20 KB): a second broadcast.
  for (int32_t tokens : {20, 300, 5000}) {
    absl::StatusOr<StepResult> result = group.leader().Execute(MakePlan(tokens, tokens));
    KVSERVE_ASSERT_OK(result);
    ASSERT_EQ(result->sampled.size(), 1u);
    EXPECT_EQ(result->sampled[0].token, 7);
  }
  group.leader().Stop();
  group.Join();
  for (int rank = 1; rank < 3; ++rank) {
    KVSERVE_EXPECT_OK(group.follower_status(rank));
    ASSERT_EQ(group.follower(rank).configs.size(), 1u);
    EXPECT_EQ(group.follower(rank).configs[0].num_blocks, 62);
    EXPECT_EQ(group.follower(rank).plans, group.leader_runner().plans) << "rank " << rank;
  }
  EXPECT_FALSE(group.leader().failed());
  EXPECT_THAT(group.leader().Execute(MakePlan(1, 20)),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(TensorParallelRunnerTest, AnIdleLeaderKeepsItsFollowersWithinTheTimeout) {
  // Collectives time out after 1 s; the leader sends nothing for 2.5 s but its keep-alives.
  Group group(2, absl::Seconds(1), absl::Milliseconds(200));
  absl::SleepFor(absl::Milliseconds(2500));
  absl::StatusOr<StepResult> result = group.leader().Execute(MakePlan(1, 20));
  KVSERVE_ASSERT_OK(result);
  EXPECT_FALSE(group.leader().failed());
  group.leader().Stop();
  group.Join();
  KVSERVE_EXPECT_OK(group.follower_status(1));
}

TEST(TensorParallelRunnerTest, AFollowerGoneFailsTheNextStepUnavailable) {
  Group group(2, absl::Seconds(5), absl::Seconds(1), /*follower_fail_at=*/2);
  KVSERVE_ASSERT_OK(group.leader().Execute(MakePlan(1, 20)));
  // The follower fails its second step and leaves. The leader's broadcasts may still be taken
  // by the kernel's buffers for a while; one of them meets the closed connection.
  absl::Status status;
  for (int step = 0; step < 200 && status.ok(); ++step) {
    status = group.leader().Execute(MakePlan(2 + step, 20)).status();
    absl::SleepFor(absl::Milliseconds(10));
  }
  group.Join();
  EXPECT_THAT(group.follower_status(1), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(status,
              StatusIs(AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded)));
  EXPECT_TRUE(group.leader().failed());
  EXPECT_THAT(group.leader().failure(), StatusIs(status.code()));
  group.leader().Stop();  // the group failed: nothing is sent; the keep-alive thread ends
}

RunnerConfig SizedConfig() {
  return RunnerConfig{.block_size = 16,
                      .num_blocks = 62,
                      .max_num_batched_tokens = 64,
                      .max_num_seqs = 4,
                      .max_context_len = 512};
}

TEST(TensorParallelRunnerTest, ARankWithoutGraphsMakesTheWholeGroupRunEagerly) {
  // Rank 2's capture "failed" (0 graphs): replaying on ranks 0 and 1 while rank 2 runs eagerly
  // would pad their batches and not its, and their all-reduces would disagree in size.
  Group group(3, absl::Seconds(30), absl::Seconds(1), 0, {4, 4, 0});
  KVSERVE_ASSERT_OK(group.leader().Initialize(SizedConfig()));
  EXPECT_EQ(group.leader().num_decode_graphs(), 0);
  EXPECT_EQ(group.leader_runner().drops, 1);
  KVSERVE_ASSERT_OK(group.leader().Execute(MakePlan(1, 20)));  // a step after: in lockstep
  group.leader().Stop();
  group.Join();
  for (int rank = 1; rank < 3; ++rank) {
    KVSERVE_EXPECT_OK(group.follower_status(rank));
    EXPECT_EQ(group.follower(rank).num_decode_graphs(), 0) << "rank " << rank;
    EXPECT_EQ(group.follower(rank).drops, 1) << "rank " << rank;
  }
}

TEST(TensorParallelRunnerTest, RanksThatAgreeKeepTheirGraphs) {
  Group group(3, absl::Seconds(30), absl::Seconds(1), 0, {4, 4, 4});
  KVSERVE_ASSERT_OK(group.leader().Initialize(SizedConfig()));
  EXPECT_EQ(group.leader().num_decode_graphs(), 4);
  group.leader().Stop();
  group.Join();
  for (int rank = 0; rank < 3; ++rank) {
    RecordingRunner& runner = rank == 0 ? group.leader_runner() : group.follower(rank);
    EXPECT_EQ(runner.num_decode_graphs(), 4) << "rank " << rank;
    EXPECT_EQ(runner.drops, 0) << "rank " << rank;
  }
}

TEST(TensorParallelRunnerTest, EveryFollowerBindsItsThreadBeforeItsFirstCall) {
  Group group(3, absl::Seconds(30), absl::Seconds(1));
  KVSERVE_ASSERT_OK(group.leader().Initialize(SizedConfig()));
  KVSERVE_ASSERT_OK(group.leader().BindThread());  // the engine thread's call, forwarded
  EXPECT_EQ(group.leader_runner().binds, 1);
  group.leader().Stop();
  group.Join();
  for (int rank = 1; rank < 3; ++rank) {
    EXPECT_EQ(group.follower(rank).binds, 1) << "rank " << rank;
  }
}

// A communicator that forwards to another and records Abort.
class AbortRecorder final : public Communicator {
 public:
  explicit AbortRecorder(Communicator* inner) : inner_(inner) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* name() const override { return "abort-recorder"; }
  absl::Status AllReduceSum(void* data, int64_t count, kernels::DType dtype) override {
    return inner_->AllReduceSum(data, count, dtype);
  }
  absl::Status AllGather(const void* in, void* out, size_t bytes) override {
    return inner_->AllGather(in, out, bytes);
  }
  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    return inner_->Broadcast(data, bytes, root);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  void Abort() override { aborted = true; }

  std::atomic<bool> aborted{false};

 private:
  Communicator* inner_;
};

TEST(TensorParallelRunnerTest, AbortCollectivesReachesTheDataCommunicatorFromAnotherThread) {
  std::vector<std::unique_ptr<Communicator>> comms = testing::MakeGlooGroup(1, absl::Seconds(5));
  ASSERT_EQ(comms.size(), 1u);
  AbortRecorder data(comms[0].get());
  TimedCommunicator timed(&data);
  TensorParallelRunner leader(std::make_unique<RecordingRunner>(1000), comms[0].get(), &timed,
                              absl::Seconds(1));
  std::thread watchdog([&] { leader.AbortCollectives(); });
  watchdog.join();
  EXPECT_TRUE(data.aborted);
  leader.Stop();
}

}  // namespace
}  // namespace kvserve
