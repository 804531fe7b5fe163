// The generated C++ gRPC code end to end: a Generation service built on the generated base class
// streams GenerateResponse messages to a client using the generated stub over an in-process
// channel (no sockets). Pins the streaming signatures the router and worker are written against,
// and that status codes and server-side cancellation travel through them.
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/worker.grpc.pb.h"

namespace kvserve::v1 {
namespace {

// Streams each prompt token id back as one choice-0 delta, then a final message with usage.
// Refuses a request without token ids the way the API specifies (INVALID_ARGUMENT naming the
// field), to check that statuses arrive at the client intact.
class EchoGeneration final : public Generation::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const GenerateRequest* request,
                        grpc::ServerWriter<GenerateResponse>* writer) override {
    if (request->input_case() != GenerateRequest::kPromptTokenIds) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "input: this test server takes prompt_token_ids only");
    }
    GenerateResponse response;
    response.set_request_id(request->request_id());
    for (int token : request->prompt_token_ids().ids()) {
      response.clear_choices();
      response.add_choices()->add_token_ids(token);
      if (!writer->Write(response)) return grpc::Status::CANCELLED;
    }
    response.clear_choices();
    response.add_choices()->set_finish_reason(FINISH_REASON_LENGTH);
    response.mutable_usage()->set_prompt_tokens(request->prompt_token_ids().ids_size());
    writer->Write(response);
    return grpc::Status::OK;
  }
};

class GrpcStubsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Generation::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  EchoGeneration service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Generation::Stub> stub_;
};

TEST_F(GrpcStubsTest, ServerStreamingGenerateDeliversEveryMessageThenUsage) {
  GenerateRequest request;
  request.set_request_id("cc-1");
  for (int token : {5, 6, 7}) request.mutable_prompt_token_ids()->add_ids(token);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader = stub_->Generate(&context, request);
  std::vector<GenerateResponse> responses;
  GenerateResponse response;
  while (reader->Read(&response)) responses.push_back(response);
  const grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(responses.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(responses[i].request_id(), "cc-1");
    EXPECT_EQ(responses[i].choices(0).token_ids(0), 5 + i);
    EXPECT_FALSE(responses[i].has_usage());
  }
  EXPECT_EQ(responses[3].choices(0).finish_reason(), FINISH_REASON_LENGTH);
  ASSERT_TRUE(responses[3].has_usage());
  EXPECT_EQ(responses[3].usage().prompt_tokens(), 3);
}

TEST_F(GrpcStubsTest, StatusCodeAndFieldNamedMessageReachTheClient) {
  GenerateRequest request;
  request.set_prompt("text");
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, request);
  GenerateResponse response;
  EXPECT_FALSE(reader->Read(&response));
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("input:", 0), 0u) << status.error_message();
}

TEST_F(GrpcStubsTest, UnimplementedUnaryMethodReportsUnimplemented) {
  grpc::ClientContext context;
  ModelInfo info;
  const grpc::Status status = stub_->GetModelInfo(&context, GetModelInfoRequest(), &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST(WorkerStubTest, GeneratedServiceHasStreamingSignatures) {
  // Compiles only while StreamStatus and Generate keep their server-streaming shape.
  Worker::Service service;
  grpc::ServerContext context;
  StatusRequest request;
  const grpc::Status status = service.StreamStatus(
      &context, &request, static_cast<grpc::ServerWriter<WorkerStatus>*>(nullptr));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace kvserve::v1
