// TLS and mTLS on the worker's gRPC port (--tls_cert / --tls_key / --tls_ca): a CA and
// certificates are made with the openssl command at test time (scripts/setup.sh installs it),
// then a WorkerServer with the fake runner is called with and without client certificates.
#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "runner/fake_model_runner.h"
#include "tests/status_matchers.h"
#include "worker/worker_server.h"

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           absl::StrCat("kvserve_tls_", getpid()));
    std::filesystem::create_directories(*dir_);
    const std::string d = *dir_;
    // A CA, then a server certificate for localhost / 127.0.0.1 and a client certificate.
    const std::string script = absl::StrCat(
        "set -e; cd ", d, "; exec >openssl.log 2>&1;",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kvserve-test-ca",
        " -keyout ca.key -out ca.pem;",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1' > san.ext;",
        "for who in server client; do",
        " openssl req -newkey rsa:2048 -nodes -subj /CN=$who -keyout $who.key -out $who.csr;",
        " openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1",
        " -extfile san.ext -out $who.pem; done");
    ok_ = std::system(script.c_str()) == 0;  // /bin/sh
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  void SetUp() override { ASSERT_TRUE(ok_) << ReadFile(*dir_ + "/openssl.log"); }

  std::unique_ptr<WorkerServer> StartServer(bool require_client_cert) {
    WorkerOptions options;
    options.model = "fake";
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.kv_memory_bytes = 64 * 16 * 1024;
    options.tls_cert = *dir_ + "/server.pem";
    options.tls_key = *dir_ + "/server.key";
    if (require_client_cert) options.tls_ca = *dir_ + "/ca.pem";
    KVSERVE_EXPECT_OK(options.Validate());
    ModelConfig config;
    config.name = "fake-model";
    absl::StatusOr<std::unique_ptr<WorkerServer>> server =
        WorkerServer::Start(options, std::make_unique<FakeModelRunner>(), nullptr, config);
    KVSERVE_EXPECT_OK(server);
    return server.ok() ? *std::move(server) : nullptr;
  }

  // GetModelInfo over a channel with the given credentials; the status code.
  static grpc::StatusCode Call(int port, std::shared_ptr<grpc::ChannelCredentials> credentials) {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), credentials, args);
    auto stub = v1::Generation::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ModelInfo info;
    return stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).error_code();
  }

  static std::shared_ptr<grpc::ChannelCredentials> Tls(bool with_client_cert) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(*dir_ + "/ca.pem");
    if (with_client_cert) {
      ssl.pem_private_key = ReadFile(*dir_ + "/client.key");
      ssl.pem_cert_chain = ReadFile(*dir_ + "/client.pem");
    }
    return grpc::SslCredentials(ssl);
  }

  static std::string* dir_;
  static bool ok_;
};

std::string* TlsTest::dir_ = nullptr;
bool TlsTest::ok_ = false;

TEST_F(TlsTest, TlsServesVerifiedClientsAndRefusesPlaintext) {
  std::unique_ptr<WorkerServer> server = StartServer(/*require_client_cert=*/false);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Call(server->grpc_port(), Tls(false)), grpc::StatusCode::OK);
  EXPECT_NE(Call(server->grpc_port(), grpc::InsecureChannelCredentials()), grpc::StatusCode::OK);
}

TEST_F(TlsTest, MutualTlsRequiresAClientCertificateFromTheCa) {
  std::unique_ptr<WorkerServer> server = StartServer(/*require_client_cert=*/true);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Call(server->grpc_port(), Tls(true)), grpc::StatusCode::OK);
  EXPECT_NE(Call(server->grpc_port(), Tls(false)), grpc::StatusCode::OK);
  EXPECT_NE(Call(server->grpc_port(), grpc::InsecureChannelCredentials()), grpc::StatusCode::OK);
}

}  // namespace
}  // namespace kvserve
