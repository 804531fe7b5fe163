// KV block transfer between two real workers in-process (WorkerServer, gRPC on loopback, the
// deterministic FakeModelRunner, whose KV holds each slot's token and position and is checked
// on every read, so a block imported for the wrong tokens fails the request). A request resumed
// on the target with a kv_source fetches the holder's blocks and continues with exactly the
// tokens the holder would have produced; a holder that breaks off mid-transfer, a torn block, a
// foreign block and an unreachable holder each keep the verified run and compute the rest, with
// the same tokens. Bad FetchKvBlocks requests get their status over the wire.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvserve/v1/worker.grpc.pb.h"
#include "runner/fake_model_runner.h"
#include "tests/status_matchers.h"
#include "worker/worker_server.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using ::testing::HasSubstr;

constexpr int kBlockSize = 16;
constexpr int kPromptTokens = 100;  // 6 full blocks + 4
constexpr int kMaxTokens = 12;
constexpr int kResumeAfter = 5;  // tokens generated on the holder before the "migration"

std::unique_ptr<WorkerServer> StartWorker(int64_t host_kv_bytes) {
  WorkerOptions options;
  options.model = "fake";
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  options.kv_memory_bytes = 64 * kBlockSize * 1024;  // 64 blocks at 1 KiB per token
  options.host_kv_bytes = host_kv_bytes;
  options.max_num_seqs = 8;
  options.max_num_batched_tokens = 64;
  options.kv_fetch_timeout_s = 5;
  EXPECT_TRUE(options.Validate().ok());
  ModelConfig config;
  config.name = "fake-model";
  absl::StatusOr<std::unique_ptr<WorkerServer>> server = WorkerServer::Start(
      options, std::make_unique<FakeModelRunner>(), /*tokenizer=*/nullptr, config);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::string Address(int port) { return absl::StrCat("127.0.0.1:", port); }

std::unique_ptr<v1::Worker::Stub> StubTo(const std::string& address) {
  return v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

std::vector<int32_t> Prompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < kPromptTokens; ++i) prompt.push_back(3 + (i * 7) % 250);
  return prompt;
}

// Runs one choice on `worker` (greedy, or seeded sampling) starting after `generated`, with an
// optional kv_source; returns the tokens it streamed.
std::vector<int32_t> Generate(v1::Worker::Stub& worker, bool seeded,
                              const std::vector<int32_t>& generated,
                              const v1::KvSource* source = nullptr) {
  v1::WorkerGenerateRequest request;
  request.set_request_id("r");
  for (int32_t id : Prompt()) request.add_prompt_token_ids(id);
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_max_tokens(kMaxTokens);
  sampling->set_seed(77);
  sampling->set_temperature(seeded ? 1.0f : 0.0f);
  v1::WorkerChoice* choice = request.add_choices();
  choice->set_index(0);
  for (int32_t id : generated) choice->add_generated_token_ids(id);
  if (source != nullptr) *request.mutable_kv_source() = *source;
  grpc::ClientContext context;
  auto reader = worker.Generate(&context, request);
  v1::GenerateResponse response;
  std::vector<int32_t> tokens;
  while (reader->Read(&response)) {
    for (const v1::ChoiceDelta& delta : response.choices()) {
      tokens.insert(tokens.end(), delta.token_ids().begin(), delta.token_ids().end());
    }
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return tokens;
}

// A stand-in for the holder's address that relays its FetchKvBlocks and misbehaves on the way:
// breaks the stream off after `break_after` blocks (as a holder that dies does), corrupts one
// block's bytes (a torn copy), or sends a block of another sequence.
class FaultyRelay final : public v1::Worker::Service {
 public:
  enum class Fault { kBreakOff, kTornBlock, kForeignBlock };

  FaultyRelay(const std::string& holder, Fault fault, int at_block)
      : holder_(StubTo(holder)), fault_(fault), at_block_(at_block) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a port of its own
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FaultyRelay() override { server_->Shutdown(); }

  std::string address() const { return Address(port_); }

  grpc::Status FetchKvBlocks(grpc::ServerContext* /*context*/,
                             const v1::FetchKvBlocksRequest* request,
                             grpc::ServerWriter<v1::KvBlockData>* writer) override {
    grpc::ClientContext upstream;
    auto reader = holder_->FetchKvBlocks(&upstream, *request);
    v1::KvBlockData block;
    for (int sent = 0; reader->Read(&block); ++sent) {
      if (sent == at_block_) {
        switch (fault_) {
          case Fault::kBreakOff:
            upstream.TryCancel();
            reader->Finish();
            return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the holder is gone");
          case Fault::kTornBlock:
            (*block.mutable_data())[block.data().size() / 2] ^= 0x5a;
            break;
          case Fault::kForeignBlock:
            block.mutable_hash()->set_low(block.hash().low() + 1);
            break;
        }
      }
      writer->Write(block);
    }
    return reader->Finish();
  }

 private:
  std::unique_ptr<v1::Worker::Stub> holder_;
  const Fault fault_;
  const int at_block_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

class KvTransferTest : public ::testing::TestWithParam<bool /*seeded*/> {
 protected:
  void SetUp() override {
    holder_ = StartWorker(/*host_kv_bytes=*/0);
    ASSERT_NE(holder_, nullptr);
    holder_stub_ = StubTo(Address(holder_->grpc_port()));
    // The holder runs the whole request: the reference tokens, and its blocks cached.
    reference_ = Generate(*holder_stub_, GetParam(), {});
    ASSERT_EQ(reference_.size(), static_cast<size_t>(kMaxTokens));
  }

  // Resumes the request on a fresh target with `source` after kResumeAfter tokens; returns the
  // target for its stats.
  std::unique_ptr<WorkerServer> Resume(const v1::KvSource& source) {
    std::unique_ptr<WorkerServer> target = StartWorker(/*host_kv_bytes=*/32 * kBlockSize * 1024);
    EXPECT_NE(target, nullptr);
    if (target == nullptr) return nullptr;
    auto stub = StubTo(Address(target->grpc_port()));
    const std::vector<int32_t> before(reference_.begin(), reference_.begin() + kResumeAfter);
    const std::vector<int32_t> after(reference_.begin() + kResumeAfter, reference_.end());
    EXPECT_EQ(Generate(*stub, GetParam(), before, &source), after);
    return target;
  }

  v1::KvSource SourceAt(const std::string& address) const {
    v1::KvSource source;
    source.set_address(address);
    source.set_num_blocks((kPromptTokens + kResumeAfter) / kBlockSize);  // 6
    return source;
  }

  std::unique_ptr<WorkerServer> holder_;
  std::unique_ptr<v1::Worker::Stub> holder_stub_;
  std::vector<int32_t> reference_;
};

std::string Metrics(WorkerServer& worker) { return worker.metrics().Serialize(); }

TEST_P(KvTransferTest, FetchedBlocksGiveTheTokensTheHolderGives) {
  std::unique_ptr<WorkerServer> target = Resume(SourceAt(Address(holder_->grpc_port())));
  ASSERT_NE(target, nullptr);
  // All 6 blocks came over and were served from the host tier instead of being computed.
  EXPECT_EQ(target->context().engine().Stats().prefix_host_hit_tokens, 6 * kBlockSize);
  EXPECT_THAT(Metrics(*target),
              HasSubstr("kvserve_kv_transfer_blocks_total{direction=\"received\"} 6"));
  EXPECT_THAT(Metrics(*target), HasSubstr("kvserve_kv_fetches_total{result=\"complete\"} 1"));
  EXPECT_THAT(Metrics(*holder_),
              HasSubstr("kvserve_kv_transfer_blocks_total{direction=\"sent\"} 6"));
}

TEST_P(KvTransferTest, AHolderThatBreaksOffLeavesTheRestToCompute) {
  FaultyRelay relay(Address(holder_->grpc_port()), FaultyRelay::Fault::kBreakOff, 2);
  std::unique_ptr<WorkerServer> target = Resume(SourceAt(relay.address()));
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(target->context().engine().Stats().prefix_host_hit_tokens, 2 * kBlockSize);
  EXPECT_THAT(Metrics(*target), HasSubstr("kvserve_kv_fetches_total{result=\"partial\"} 1"));
}

TEST_P(KvTransferTest, ATornBlockEndsTheVerifiedRun) {
  FaultyRelay relay(Address(holder_->grpc_port()), FaultyRelay::Fault::kTornBlock, 3);
  std::unique_ptr<WorkerServer> target = Resume(SourceAt(relay.address()));
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(target->context().engine().Stats().prefix_host_hit_tokens, 3 * kBlockSize);
  EXPECT_THAT(Metrics(*target),
              HasSubstr("kvserve_kv_transfer_blocks_total{direction=\"received\"} 3"));
}

TEST_P(KvTransferTest, ABlockOfAnotherSequenceIsRefused) {
  FaultyRelay relay(Address(holder_->grpc_port()), FaultyRelay::Fault::kForeignBlock, 0);
  std::unique_ptr<WorkerServer> target = Resume(SourceAt(relay.address()));
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(target->context().engine().Stats().prefix_host_hit_tokens, 0);
  EXPECT_THAT(Metrics(*target), HasSubstr("kvserve_kv_fetches_total{result=\"failed\"} 1"));
}

TEST_P(KvTransferTest, AnUnreachableHolderIsComputedAround) {
  std::unique_ptr<WorkerServer> gone = StartWorker(0);
  ASSERT_NE(gone, nullptr);
  const std::string address = Address(gone->grpc_port());
  gone.reset();  // drains and closes its port
  std::unique_ptr<WorkerServer> target = Resume(SourceAt(address));
  ASSERT_NE(target, nullptr);
  EXPECT_EQ(target->context().engine().Stats().prefix_host_hit_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSeeded, KvTransferTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Seeded" : "Greedy";
                         });

TEST(KvTransferRequestTest, BadRequestsGetTheirStatusOverTheWire) {
  std::unique_ptr<WorkerServer> worker = StartWorker(0);
  ASSERT_NE(worker, nullptr);
  auto stub = StubTo(Address(worker->grpc_port()));
  v1::ModelInfo info;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  }
  ASSERT_THAT(info.kv_transfer_format(), HasSubstr("block_size=16"));
  struct Case {
    std::string name;
    std::function<void(v1::FetchKvBlocksRequest*)> mutate;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"format", [](auto* r) { r->set_kv_format("llama-kv/1 other"); },
       grpc::StatusCode::FAILED_PRECONDITION, "kv_format"},
      {"no tokens", [](auto* r) { r->clear_token_ids(); }, grpc::StatusCode::INVALID_ARGUMENT,
       "token_ids"},
      {"first block", [](auto* r) { r->set_first_block(-1); }, grpc::StatusCode::INVALID_ARGUMENT,
       "first_block"},
      {"max blocks", [](auto* r) { r->set_max_blocks(-2); }, grpc::StatusCode::INVALID_ARGUMENT,
       "max_blocks"},
  };
  for (const Case& c : cases) {
    v1::FetchKvBlocksRequest request;
    for (int32_t id : Prompt()) request.add_token_ids(id);
    request.set_kv_format(info.kv_transfer_format());
    c.mutate(&request);
    grpc::ClientContext context;
    auto reader = stub->FetchKvBlocks(&context, request);
    v1::KvBlockData block;
    EXPECT_FALSE(reader->Read(&block)) << c.name;
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), c.code) << c.name;
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  // Nothing cached: an OK, empty stream.
  v1::FetchKvBlocksRequest request;
  for (int32_t id : Prompt()) request.add_token_ids(id);
  request.set_kv_format(info.kv_transfer_format());
  grpc::ClientContext context;
  auto reader = stub->FetchKvBlocks(&context, request);
  v1::KvBlockData block;
  EXPECT_FALSE(reader->Read(&block));
  EXPECT_TRUE(reader->Finish().ok());

  // A kv_source without an address is refused with the request.
  v1::WorkerGenerateRequest generate;
  generate.set_request_id("r");
  generate.add_prompt_token_ids(5);
  generate.mutable_sampling()->set_max_tokens(2);
  generate.add_choices()->set_index(0);
  generate.mutable_kv_source()->set_num_blocks(1);
  grpc::ClientContext generate_context;
  auto stream = stub->Generate(&generate_context, generate);
  v1::GenerateResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("kv_source.address"));
}

}  // namespace
}  // namespace kvserve
