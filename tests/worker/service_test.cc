// The worker's gRPC layer in-process: a real WorkerServer (both services, health, reflection,
// metrics) on loopback with the deterministic FakeModelRunner, driven by the generated C++ stubs.
// Pins streaming, statuses over the wire, cancel / deadline freeing KV blocks, StreamStatus
// (snapshot first, then consecutive event batches) and drain.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/worker.grpc.pb.h"
#include "runner/fake_model_runner.h"
#include "tests/status_matchers.h"
#include "worker/worker_server.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(absl::Milliseconds(2)); }

  void StartServer(absl::Duration step_delay) {
    WorkerOptions options;
    options.model = "fake";
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.kv_memory_bytes = 64 * 16 * 1024;  // 64 blocks of 16 tokens at 1 KiB per token
    options.max_num_seqs = 8;
    options.max_num_batched_tokens = 64;
    KVSERVE_ASSERT_OK(options.Validate());
    FakeModelOptions fake;
    fake.step_delay = step_delay;
    ModelConfig config;
    config.name = "fake-model";
    absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(
        options, std::make_unique<FakeModelRunner>(fake), /*tokenizer=*/nullptr, config);
    KVSERVE_ASSERT_OK(server);
    server_ = *std::move(server);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                       grpc::InsecureChannelCredentials());
    generation_ = v1::Generation::NewStub(channel);
    worker_ = v1::Worker::NewStub(channel);
  }

  static v1::GenerateRequest TokenRequest(int num_prompt_tokens, int max_tokens) {
    v1::GenerateRequest request;
    for (int i = 0; i < num_prompt_tokens; ++i) {
      request.mutable_prompt_token_ids()->add_ids(1 + i % 200);
    }
    request.mutable_sampling()->set_temperature(0.0f);
    request.mutable_sampling()->set_max_tokens(max_tokens);
    return request;
  }

  // Waits until the engine holds no blocks for running requests.
  bool WaitForNoUsedBlocks() {
    for (int i = 0; i < 500; ++i) {
      if (server_->context().engine().Stats().used_blocks == 0) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  std::unique_ptr<WorkerServer> server_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::Worker::Stub> worker_;
};

TEST_F(ServiceTest, GenerateStreamsTokensThenUsageLast) {
  v1::GenerateRequest request = TokenRequest(20, 8);
  request.set_request_id("client-1");
  grpc::ClientContext context;
  auto reader = generation_->Generate(&context, request);
  v1::GenerateResponse response;
  std::vector<int32_t> tokens;
  int finished = 0;
  bool usage_seen = false;
  while (reader->Read(&response)) {
    EXPECT_EQ(response.request_id(), "client-1");
    EXPECT_FALSE(usage_seen) << "usage must be in the last message only";
    for (const v1::ChoiceDelta& delta : response.choices()) {
      tokens.insert(tokens.end(), delta.token_ids().begin(), delta.token_ids().end());
      if (delta.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        ++finished;
        EXPECT_EQ(delta.finish_reason(), v1::FINISH_REASON_LENGTH);
      }
    }
    if (response.has_usage()) {
      usage_seen = true;
      EXPECT_EQ(response.usage().prompt_tokens(), 20);
      EXPECT_EQ(response.usage().completion_tokens(), 8);
    }
  }
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tokens.size(), 8u);
  EXPECT_EQ(finished, 1);
  EXPECT_TRUE(usage_seen);
  EXPECT_THAT(server_->metrics().Serialize(),
              HasSubstr("kvserve_requests_finished_total{reason=\"length\"} 1"));
}

TEST_F(ServiceTest, BadRequestsGetTheirStatusOverTheWire) {
  struct Case {
    v1::GenerateRequest request;
    grpc::StatusCode code;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({v1::GenerateRequest(), grpc::StatusCode::INVALID_ARGUMENT, "input"});
  Case top_p{TokenRequest(4, 4), grpc::StatusCode::INVALID_ARGUMENT, "sampling.top_p"};
  top_p.request.mutable_sampling()->set_top_p(0.0f);
  cases.push_back(top_p);
  Case unknown_id{TokenRequest(4, 4), grpc::StatusCode::INVALID_ARGUMENT,
                  "prompt_token_ids.ids[4]"};
  unknown_id.request.mutable_prompt_token_ids()->add_ids(256);  // the fake vocabulary is 256
  cases.push_back(unknown_id);
  Case text{v1::GenerateRequest(), grpc::StatusCode::INVALID_ARGUMENT, "input"};
  text.request.set_prompt("no tokenizer here");
  cases.push_back(text);
  cases.push_back({TokenRequest(1024, 1), grpc::StatusCode::INVALID_ARGUMENT, "input"});
  Case n_too_big{TokenRequest(4, 900), grpc::StatusCode::RESOURCE_EXHAUSTED, "sampling.max_tokens"};
  n_too_big.request.mutable_sampling()->set_n(8);  // 8 x 900 tokens never fit in 64 blocks
  cases.push_back(n_too_big);
  Case model{TokenRequest(4, 4), grpc::StatusCode::NOT_FOUND, "model"};
  model.request.set_model("gpt-9");
  cases.push_back(model);
  for (const Case& c : cases) {
    grpc::ClientContext context;
    auto reader = generation_->Generate(&context, c.request);
    v1::GenerateResponse response;
    EXPECT_FALSE(reader->Read(&response));
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_THAT(status.error_message(), StartsWith(c.field + ": "));
  }
}

TEST_F(ServiceTest, CancelMidStreamAbortsTheRequestAndFreesItsBlocks) {
  grpc::ClientContext context;
  auto reader = generation_->Generate(&context, TokenRequest(40, 900));
  v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_GT(server_->context().engine().Stats().used_blocks, 0);
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitForNoUsedBlocks());
  EXPECT_THAT(server_->metrics().Serialize(),
              HasSubstr("kvserve_requests_finished_total{reason=\"cancelled\"} 1"));
}

TEST_F(ServiceTest, DeadlineAbortsTheRequestAndFreesItsBlocks) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  auto reader = generation_->Generate(&context, TokenRequest(40, 900));
  v1::GenerateResponse response;
  int messages = 0;
  while (reader->Read(&response)) ++messages;
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_GT(messages, 0);
  EXPECT_TRUE(WaitForNoUsedBlocks());
}

TEST_F(ServiceTest, StreamStatusSendsSnapshotFirstThenConsecutiveBatches) {
  grpc::ClientContext context;
  auto status_reader = worker_->StreamStatus(&context, v1::StatusRequest());
  v1::WorkerStatus status;
  ASSERT_TRUE(status_reader->Read(&status));
  ASSERT_TRUE(status.has_snapshot());
  EXPECT_EQ(status.snapshot().part_index(), 0);
  EXPECT_TRUE(status.snapshot().last_part());
  EXPECT_NE(status.epoch(), 0u);
  EXPECT_EQ(status.identity().model_name(), "fake-model");
  EXPECT_EQ(status.identity().worker_id(), absl::StrCat("127.0.0.1:", server_->grpc_port()));
  EXPECT_EQ(status.capacity().total_blocks(), 64);
  uint64_t last_sequence = status.snapshot().sequence();

  // 40 prompt tokens + 8 generated: at least two full blocks enter the prefix cache.
  grpc::ClientContext generate_context;
  auto reader = generation_->Generate(&generate_context, TokenRequest(40, 8));
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
  }
  ASSERT_TRUE(reader->Finish().ok());

  int stored = 0;
  while (stored < 2 && status_reader->Read(&status)) {
    EXPECT_FALSE(status.has_snapshot());
    EXPECT_EQ(status.capacity().total_blocks(),
              status.capacity().free_blocks() + status.capacity().used_blocks());
    for (const v1::KvEventBatch& batch : status.event_batches()) {
      EXPECT_EQ(batch.sequence(), last_sequence + 1) << "gap in KV event batches";
      last_sequence = batch.sequence();
      for (const v1::KvEvent& event : batch.events()) {
        if (event.has_stored()) stored += event.stored().blocks_size();
      }
    }
  }
  EXPECT_GE(stored, 2);
  context.TryCancel();
  status_reader->Finish();
}

TEST_F(ServiceTest, WorkerGenerateResumesChoicesAndModelInfoDescribesLimits) {
  v1::ModelInfo info;
  grpc::ClientContext info_context;
  ASSERT_TRUE(worker_->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.name(), "fake-model");
  EXPECT_EQ(info.kv_block_size(), 16);
  EXPECT_EQ(info.vocab_size(), 256);
  EXPECT_GT(info.limits().max_prompt_tokens(), 0);

  v1::WorkerGenerateRequest request;
  request.set_request_id("router-7");
  for (int i = 0; i < 10; ++i) request.add_prompt_token_ids(10 + i);
  request.mutable_sampling()->set_seed(42);
  request.mutable_sampling()->set_max_tokens(6);
  request.mutable_sampling()->set_n(2);
  v1::WorkerChoice* resumed = request.add_choices();
  resumed->set_index(1);
  resumed->add_generated_token_ids(5);
  resumed->add_generated_token_ids(6);
  grpc::ClientContext context;
  auto reader = worker_->Generate(&context, request);
  v1::GenerateResponse response;
  int tokens = 0;
  while (reader->Read(&response)) {
    EXPECT_EQ(response.request_id(), "router-7");
    for (const v1::ChoiceDelta& delta : response.choices()) {
      EXPECT_EQ(delta.index(), 1);
      tokens += delta.token_ids_size();
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 4);  // max_tokens 6 minus the 2 generated before the migration
}

TEST_F(ServiceTest, DrainRefusesNewRequestsAndLetsRunningOnesFinish) {
  grpc::ClientContext running_context;
  auto running = generation_->Generate(&running_context, TokenRequest(8, 60));
  v1::GenerateResponse response;
  ASSERT_TRUE(running->Read(&response));

  std::thread drainer([this] { EXPECT_TRUE(server_->Drain(absl::Seconds(30))); });
  while (!server_->context().draining()) absl::SleepFor(absl::Milliseconds(1));

  grpc::ClientContext refused_context;
  auto refused = generation_->Generate(&refused_context, TokenRequest(8, 4));
  EXPECT_FALSE(refused->Read(&response));
  const grpc::Status refused_status = refused->Finish();
  EXPECT_EQ(refused_status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused_status.error_message();

  int tokens = 1;
  while (running->Read(&response)) {
    for (const v1::ChoiceDelta& delta : response.choices()) tokens += delta.token_ids_size();
  }
  EXPECT_TRUE(running->Finish().ok());
  EXPECT_GE(tokens, 60);
  drainer.join();
}

}  // namespace
}  // namespace kvserve
