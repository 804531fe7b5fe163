// Tests of RawGenerationService and the gRPC server helpers (api/grpc_server.h), the pieces the
// worker's and the router's Generation services share: in-process on loopback with a small
// service that answers from the request, driven by the generated C++ stub. Pins the unary path
// (admit before parsing, malformed bytes answered as INVALID_ARGUMENT naming the field, absl
// statuses carried over the wire as they are), the --listen errors, and the listen check.
#include "api/raw_generation_service.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "api/grpc_server.h"
#include "api/listen_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;
using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Refuses calls that carry the metadata "deny"; Tokenize answers one id per prompt byte,
// Detokenize NOT_FOUND, GetModelInfo the model name it was asked for.
class EchoService final : public RawGenerationService {
 public:
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(
      grpc::CallbackServerContext* /*call*/, const grpc::ByteBuffer* /*request*/) override {
    class Refused : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
     public:
      Refused() { Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no Generate here")); }
      void OnDone() override { delete this; }
    };
    return new Refused();
  }

 private:
  absl::Status Admit(const grpc::CallbackServerContext& call) const override {
    if (call.client_metadata().count("deny") > 0) return absl::UnauthenticatedError("denied");
    return absl::OkStatus();
  }
  absl::StatusOr<v1::TokenizeResponse> AnswerTokenize(
      const v1::TokenizeRequest& request) const override {
    v1::TokenizeResponse response;
    for (char c : request.prompt()) response.add_token_ids(static_cast<unsigned char>(c));
    return response;
  }
  absl::StatusOr<v1::DetokenizeResponse> AnswerDetokenize(
      const v1::DetokenizeRequest& /*request*/) const override {
    return absl::NotFoundError("model: no such model");
  }
  absl::StatusOr<v1::ModelInfo> AnswerGetModelInfo(
      const v1::GetModelInfoRequest& request) const override {
    v1::ModelInfo info;
    info.set_name(request.model());
    return info;
  }
};

class RawGenerationServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EnableHealthAndReflection();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    absl::StatusOr<std::unique_ptr<grpc::Server>> server =
        StartGrpcServer(builder, "127.0.0.1:0", port_);
    KVSERVE_ASSERT_OK(server);
    server_ = *std::move(server);
    stub_ = v1::Generation::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  EchoService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(RawGenerationServiceTest, AnswersParsedRequests) {
  grpc::ClientContext context;
  v1::TokenizeRequest request;
  request.set_prompt("ab");
  v1::TokenizeResponse response;
  ASSERT_TRUE(stub_->Tokenize(&context, request, &response).ok());
  EXPECT_THAT(response.token_ids(), ::testing::ElementsAre('a', 'b'));

  grpc::ClientContext info_context;
  v1::GetModelInfoRequest info_request;
  info_request.set_model("m");
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&info_context, info_request, &info).ok());
  EXPECT_EQ(info.name(), "m");
}

TEST_F(RawGenerationServiceTest, ErrorsKeepTheirCodeAndMessage) {
  grpc::ClientContext context;
  v1::DetokenizeResponse response;
  const grpc::Status status = stub_->Detokenize(&context, v1::DetokenizeRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "model: no such model");
}

TEST_F(RawGenerationServiceTest, InvalidUtf8IsRefusedNamingTheField) {
  grpc::ClientContext context;
  v1::TokenizeRequest request;
  request.set_prompt("\xff\xfe");  // the client's protobuf sends it; the server must name it
  v1::TokenizeResponse response;
  const grpc::Status status = stub_->Tokenize(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), StartsWith("prompt:"));
}

TEST_F(RawGenerationServiceTest, AdmitRunsBeforeTheRequestIsParsed) {
  grpc::ClientContext context;
  context.AddMetadata("deny", "1");
  v1::TokenizeRequest request;
  request.set_prompt("\xff");  // malformed, but the call is refused first
  v1::TokenizeResponse response;
  const grpc::Status status = stub_->Tokenize(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "denied");
}

TEST(StartGrpcServerTest, AnAddressThatCannotBeBoundNamesTheFlag) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("no-such-host.invalid:0", grpc::InsecureServerCredentials(), &port);
  EXPECT_THAT(StartGrpcServer(builder, "no-such-host.invalid:0", port),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--listen no-such-host.invalid:0: cannot resolve")));
}

// gRPC turns SO_REUSEPORT on by default: a second server on a used port started and shared it.
TEST(StartGrpcServerTest, ASecondServerOnAUsedPortFailsNamingTheFlagAndThePort) {
  EnableHealthAndReflection();
  grpc::ServerBuilder first_builder;
  int first_port = 0;
  first_builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &first_port);
  absl::StatusOr<std::unique_ptr<grpc::Server>> first =
      StartGrpcServer(first_builder, "127.0.0.1:0", first_port);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string used = absl::StrCat("127.0.0.1:", first_port);

  grpc::ServerBuilder second_builder;
  int second_port = 0;
  second_builder.AddListeningPort(used, grpc::InsecureServerCredentials(), &second_port);
  EXPECT_THAT(StartGrpcServer(second_builder, used, second_port),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("--listen ", used, ": address already in use")));
  (*first)->Shutdown();
}

TEST(CheckCanListenTest, APortAServerListensOnIsInUse) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  absl::StatusOr<std::unique_ptr<grpc::Server>> server =
      StartGrpcServer(builder, "127.0.0.1:0", port);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string used = absl::StrCat("127.0.0.1:", port);
  EXPECT_THAT(CheckCanListen("--metrics_listen", used),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("--metrics_listen ", used, ": address already in use")));
  (*server)->Shutdown();
  (*server)->Wait();
  server->reset();
  EXPECT_TRUE(CheckCanListen("--metrics_listen", used).ok());
}

// A port number nothing listens on now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

TEST(CheckServingPortsTest, TwoFlagsOnOnePortAreRefusedBeforeAnyBind) {
  EXPECT_TRUE(CheckServingPorts("127.0.0.1:0", "127.0.0.1:0", 0).ok());
  EXPECT_TRUE(CheckServingPorts("127.0.0.1:0", "127.0.0.1:0", -1).ok());
  const int port = FreePort();
  EXPECT_THAT(
      CheckServingPorts(absl::StrCat("127.0.0.1:", port), absl::StrCat("0.0.0.0:", port), -1),
      StatusIs(absl::StatusCode::kInvalidArgument,
               absl::StrCat("--metrics_listen 0.0.0.0:", port, ": the port of --listen too")));
  EXPECT_THAT(
      CheckServingPorts("127.0.0.1:0", absl::StrCat("127.0.0.1:", port), port),
      StatusIs(absl::StatusCode::kInvalidArgument,
               absl::StrCat("--http_port 127.0.0.1:", port, ": the port of --metrics_listen too")));
}

TEST(CheckCanListenTest, PortZeroPassesAndBadAddressesAreNamed) {
  EXPECT_TRUE(CheckCanListen("--listen", "127.0.0.1:0").ok());
  EXPECT_THAT(
      CheckCanListen("--listen", "127.0.0.1"),
      StatusIs(absl::StatusCode::kInvalidArgument, "--listen 127.0.0.1: expected host:port"));
  EXPECT_THAT(CheckCanListen("--listen", "127.0.0.1:70000"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[0, 65535]")));
  EXPECT_THAT(CheckCanListen("--listen", "no-such-host.invalid:1234"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--listen no-such-host.invalid:1234: cannot resolve")));
}

}  // namespace
}  // namespace kvserve
