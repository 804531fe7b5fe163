// Tests of the router's start-up options: every invalid flag is refused with a message that
// starts with the flag, and DNS discovery resolves names to "ip:port" worker ids.
#include <fstream>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "router/router_server_options.h"
#include "router/worker_registry.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::StartsWith;

RouterServerOptions Valid() {
  RouterServerOptions options;
  options.workers = "127.0.0.1:50061, 127.0.0.1:50062";
  options.model = "/models/any.gguf";
  return options;
}

void ExpectRefusedNaming(const RouterServerOptions& options, const std::string& flag) {
  absl::Status status = options.Validate();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(flag + ":")));
}

TEST(RouterServiceOptionsTest, ValidOptionsPassAndListIsSplit) {
  KVSERVE_ASSERT_OK(Valid().Validate());
  EXPECT_EQ(StaticWorkerAddresses(Valid()),
            (std::vector<std::string>{"127.0.0.1:50061", "127.0.0.1:50062"}));
}

TEST(RouterServiceOptionsTest, EachBadFlagIsNamed) {
  RouterServerOptions o = Valid();
  o.workers = "";
  ExpectRefusedNaming(o, "--workers");  // neither discovery
  o = Valid();
  o.workers_dns = "workers:50061";
  ExpectRefusedNaming(o, "--workers");  // both
  o = Valid();
  o.workers = "127.0.0.1:0";
  ExpectRefusedNaming(o, "--workers");
  o = Valid();
  o.workers = "no-port";
  ExpectRefusedNaming(o, "--workers");
  o = Valid();
  o.workers = "";
  o.workers_dns = "headless.svc";
  ExpectRefusedNaming(o, "--workers_dns");
  o = Valid();
  o.listen = "127.0.0.1:99999";
  ExpectRefusedNaming(o, "--listen");
  o = Valid();
  o.metrics_listen = "x";
  ExpectRefusedNaming(o, "--metrics_listen");
  o = Valid();
  o.max_migrations = -1;
  ExpectRefusedNaming(o, "--max_migrations");
  o = Valid();
  o.dns_refresh_s = 0;
  ExpectRefusedNaming(o, "--dns_refresh_s");
  o = Valid();
  o.model = "";
  ExpectRefusedNaming(o, "--model");
  o = Valid();
  o.tls_cert = "cert.pem";
  ExpectRefusedNaming(o, "--tls_key");
  o = Valid();
  o.tls_ca = "ca.pem";
  ExpectRefusedNaming(o, "--tls_ca");
  o = Valid();
  o.worker_tls_cert = "c.pem";
  o.worker_tls_key = "k.pem";
  ExpectRefusedNaming(o, "--worker_tls_cert");
  o = Valid();
  o.core.block_size = 12;
  ExpectRefusedNaming(o, "--block_size");
  o = Valid();
  o.core.admission.max_waiting_requests = -1;
  ExpectRefusedNaming(o, "--max_queue");
  o = Valid();
  o.core.weights.transfer_token_cost = -0.5;
  ExpectRefusedNaming(o, "--transfer_token_cost");
  o.core.weights.transfer_token_cost = std::numeric_limits<double>::quiet_NaN();
  ExpectRefusedNaming(o, "--transfer_token_cost");
  o.core.weights.transfer_token_cost = std::numeric_limits<double>::infinity();
  ExpectRefusedNaming(o, "--transfer_token_cost");
}

TEST(RouterServiceOptionsTest, KvTransferFlagsAcceptTheirRange) {
  RouterServerOptions o = Valid();
  EXPECT_TRUE(o.core.kv_transfer) << "on by default";
  o.core.kv_transfer = false;
  KVSERVE_EXPECT_OK(o.Validate());
  o.core.weights.transfer_token_cost = 0;  // free: any run worth fetching is fetched
  KVSERVE_EXPECT_OK(o.Validate());
  o.core.weights.transfer_token_cost = 2.5;  // dearer than computing: never fetched
  KVSERVE_EXPECT_OK(o.Validate());
}

TEST(RouterServiceOptionsTest, ChatTemplateFileMustBeReadableAndParse) {
  RouterServerOptions o = Valid();
  o.chat_template = "/nonexistent/template.jinja";
  ExpectRefusedNaming(o, "--chat_template");
  o.chat_template = ::testing::TempDir() + "/router_unterminated.jinja";
  std::ofstream(o.chat_template) << "{{ messages";
  ExpectRefusedNaming(o, "--chat_template");
  std::ofstream(o.chat_template) << "{{ messages | length }}";
  KVSERVE_EXPECT_OK(o.Validate());
}

TEST(RouterServiceOptionsTest, UnreadableTlsFileNamesItsFlag) {
  RouterServerOptions o = Valid();
  o.tls_cert = "/nonexistent/cert.pem";
  o.tls_key = "/nonexistent/key.pem";
  absl::StatusOr<RouterTlsMaterial> tls = LoadRouterTls(o);
  EXPECT_THAT(tls, StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("--tls_cert:")));
}

TEST(RouterServiceOptionsTest, DnsDiscoveryResolvesLocalhostToIpAndPort) {
  absl::StatusOr<std::vector<std::string>> resolved = ResolveWorkers("localhost:50061");
  KVSERVE_ASSERT_OK(resolved);
  ASSERT_FALSE(resolved->empty());
  for (const std::string& address : *resolved) {
    EXPECT_TRUE(address == "127.0.0.1:50061" || address == "[::1]:50061") << address;
  }
  EXPECT_FALSE(ResolveWorkers("no-such-host.invalid:50061").ok());
}

}  // namespace
}  // namespace kvserve
