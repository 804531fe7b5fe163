// Tests of MetricsServer (http/metrics_server.h) on loopback with raw HTTP/1.1: /metrics serves
// what is registered and the build-info gauge, /health answers, unknown paths are 404 and wrong
// methods 405 (the server lives on), HEAD sends headers only, and a used port is refused naming
// the flag and the address.
#include "http/metrics_server.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/build_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` on a new connection to 127.0.0.1:`port`; what comes back until the server
// closes the connection.
std::string Exchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    ssize_t n = 0;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  }
  close(fd);
  return response;
}

std::string Request(absl::string_view method, absl::string_view path) {
  return absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<MetricsServer>> started = MetricsServer::Start("127.0.0.1:0");
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    auto registry = std::make_shared<prometheus::Registry>();
    prometheus::BuildCounter()
        .Name("test_events_total")
        .Help("events")
        .Register(*registry)
        .Add({})
        .Increment(3);
    server_->Register(registry);
  }

  std::unique_ptr<MetricsServer> server_;
};

TEST_F(MetricsServerTest, MetricsServesTheRegisteredFamiliesAndTheBuildInfo) {
  const std::string response = Exchange(server_->port(), Request("GET", "/metrics"));
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 "));
  EXPECT_THAT(response, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(response, HasSubstr("\ntest_events_total 3\n"));
  EXPECT_THAT(response, HasSubstr(absl::StrCat("\nkvserve_build_info{commit=\"", KvserveCommit(),
                                               "\",version=\"", KvserveVersion(), "\"} 1\n")));
  EXPECT_THAT(server_->Scrape(), HasSubstr("test_events_total 3"));
}

TEST_F(MetricsServerTest, HealthAnswersGetAndHead) {
  EXPECT_THAT(Exchange(server_->port(), Request("GET", "/health")),
              AllOf(StartsWith("HTTP/1.1 200 "), EndsWith("\r\n\r\nok\n")));
  EXPECT_THAT(
      Exchange(server_->port(), Request("HEAD", "/health")),
      AllOf(StartsWith("HTTP/1.1 200 "), HasSubstr("Content-Length: 3\r\n"), EndsWith("\r\n\r\n")));
}

TEST_F(MetricsServerTest, UnknownPathsAre404AndWrongMethods405AndTheServerLivesOn) {
  for (const char* method : {"GET", "POST", "HEAD", "DELETE", "BREW"}) {
    for (const char* path : {"/", "/nope", "/%s%s%s%n%n", "/metricsx"}) {
      EXPECT_THAT(Exchange(server_->port(), Request(method, path)), StartsWith("HTTP/1.1 404 "))
          << method << " " << path;
    }
  }
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS", "BREW"}) {
    EXPECT_THAT(Exchange(server_->port(), Request(method, "/metrics")),
                AllOf(StartsWith("HTTP/1.1 405 "), HasSubstr("\r\nAllow: GET, HEAD\r\n")))
        << method;
  }
  EXPECT_THAT(Exchange(server_->port(), Request("GET", "/metrics")), StartsWith("HTTP/1.1 200 "));
}

TEST_F(MetricsServerTest, HeadSendsHeadersOnlySoAPipelinedRequestStaysFramed) {
  const std::string response = Exchange(
      server_->port(), "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n" + Request("GET", "/health"));
  const size_t second = response.find("HTTP/1.1 ", 1);
  ASSERT_NE(second, std::string::npos) << response;
  EXPECT_THAT(response.substr(0, second), EndsWith("\r\n\r\n"));
  EXPECT_THAT(response.substr(second), AllOf(StartsWith("HTTP/1.1 200 "), EndsWith("ok\n")));
}

TEST_F(MetricsServerTest, PipelinedRequestsAreAnsweredInOrder) {
  const std::string response = Exchange(server_->port(),
                                        "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                                        "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" +
                                            Request("GET", "/health"));
  EXPECT_THAT(response, StartsWith("HTTP/1.1 200 "));
  const size_t second = response.find("HTTP/1.1 404 ");
  ASSERT_NE(second, std::string::npos) << response;
  EXPECT_THAT(response.substr(second + 1), HasSubstr("HTTP/1.1 200 "));
}

TEST_F(MetricsServerTest, AUsedPortIsRefusedNamingTheFlagAndTheAddress) {
  const std::string used = absl::StrCat("127.0.0.1:", server_->port());
  EXPECT_THAT(MetricsServer::Start(used),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       absl::StrCat("--metrics_listen ", used, ": address already in use")));
  EXPECT_THAT(MetricsServer::Start("127.0.0.1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expected host:port")));
}

}  // namespace
}  // namespace kvserve
