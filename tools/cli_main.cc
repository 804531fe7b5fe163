// kvserve-cli: a command-line client of a kvserve router (or a single worker).
//
//   kvserve-cli generate "The capital of France is" --max_tokens=16 --temperature=0
//   kvserve-cli chat "Write a haiku about caches."
//   kvserve-cli tokenize "Hello world"
//   kvserve-cli workers                      (the router's workers, kvserve.v1.RouterAdmin)
//   kvserve-cli workers --workers=127.0.0.1:50061,127.0.0.1:50062   (asking workers directly)
//
// --target is the router (default 127.0.0.1:50051); --token sends "authorization: Bearer ...";
// --tls_ca (+ --tls_cert / --tls_key for mTLS) connects with TLS. `generate` and `chat` print
// the text as it streams, then the usage on stderr. `workers` prints one table row per worker:
// without --workers it asks the router at --target (RouterAdmin.ListWorkers: every worker the
// router knows, with its health and the capacity the router's books hold); with --workers it asks
// each named worker for its status directly (Worker.StreamStatus: the first message carries the
// capacity and a snapshot of the cached blocks), e.g. to look at workers without a router.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/program_usage.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/router_admin.grpc.pb.h"
#include "kvserve/v1/worker.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Router (or worker) host:port");
ABSL_FLAG(std::string, token, "", "Bearer token (the router's --auth_tokens_file)");
ABSL_FLAG(std::string, tls_ca, "", "PEM CA: connect with TLS, verifying the server with it");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate (mTLS)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "", "Expected server name, when not the target host");
ABSL_FLAG(int32_t, max_tokens, 64, "generate/chat: tokens to generate at most");
ABSL_FLAG(double, temperature, -1, "generate/chat: sampling temperature (-1: server default)");
ABSL_FLAG(int64_t, seed, -1, "generate/chat: sampling seed (-1: the router draws one)");
ABSL_FLAG(std::string, system, "", "chat: a system message");
ABSL_FLAG(double, timeout_s, 300, "Deadline of each call in seconds");
ABSL_FLAG(std::string, workers, "",
          "workers: host:port,... of workers to ask directly (empty: ask the router at --target)");

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::shared_ptr<grpc::Channel> Connect(const std::string& target) {
  grpc::ChannelArguments args;
  if (!absl::GetFlag(FLAGS_tls_server_name).empty()) {
    args.SetSslTargetNameOverride(absl::GetFlag(FLAGS_tls_server_name));
  }
  if (absl::GetFlag(FLAGS_tls_ca).empty()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(absl::GetFlag(FLAGS_tls_ca));
  if (!absl::GetFlag(FLAGS_tls_cert).empty()) {
    ssl.pem_cert_chain = ReadFile(absl::GetFlag(FLAGS_tls_cert));
    ssl.pem_private_key = ReadFile(absl::GetFlag(FLAGS_tls_key));
  }
  return grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl), args);
}

void Prepare(grpc::ClientContext* context) {
  context->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1000)));
  if (!absl::GetFlag(FLAGS_token).empty()) {
    context->AddMetadata("authorization", "Bearer " + absl::GetFlag(FLAGS_token));
  }
}

int Report(const grpc::Status& status) {
  if (status.ok()) return 0;
  std::cerr << "kvserve-cli: "
            << absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())) << ": "
            << status.error_message() << std::endl;
  return 1;
}

int Generate(v1::GenerateRequest request) {
  v1::SamplingParams* sampling = request.mutable_sampling();
  sampling->set_max_tokens(absl::GetFlag(FLAGS_max_tokens));
  if (absl::GetFlag(FLAGS_temperature) >= 0) {
    sampling->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  }
  if (absl::GetFlag(FLAGS_seed) >= 0) sampling->set_seed(absl::GetFlag(FLAGS_seed));
  auto stub = v1::Generation::NewStub(Connect(absl::GetFlag(FLAGS_target)));
  grpc::ClientContext context;
  Prepare(&context);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    for (const v1::ChoiceDelta& delta : response.choices()) std::cout << delta.text();
    std::cout.flush();
    if (response.has_usage()) {
      std::cout << std::endl;
      std::cerr << absl::StrFormat("[prompt %d tokens (%d cached), completion %d tokens]\n",
                                   response.usage().prompt_tokens(),
                                   response.usage().cached_prompt_tokens(),
                                   response.usage().completion_tokens());
    }
  }
  return Report(reader->Finish());
}

int Tokenize(const std::string& text) {
  auto stub = v1::Generation::NewStub(Connect(absl::GetFlag(FLAGS_target)));
  grpc::ClientContext context;
  Prepare(&context);
  v1::TokenizeRequest request;
  request.set_prompt(text);
  request.set_return_token_bytes(true);
  v1::TokenizeResponse response;
  if (int rc = Report(stub->Tokenize(&context, request, &response)); rc != 0) return rc;
  for (int i = 0; i < response.token_ids_size(); ++i) {
    std::cout << absl::StrFormat("%8d  %s\n", response.token_ids(i),
                                 absl::CHexEscape(response.token_bytes(i)));
  }
  std::cout << response.token_ids_size() << " tokens" << std::endl;
  return 0;
}

// The router's table: RouterAdmin.ListWorkers at --target.
int RouterWorkers() {
  auto stub = v1::RouterAdmin::NewStub(Connect(absl::GetFlag(FLAGS_target)));
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListWorkersResponse response;
  grpc::Status status = stub->ListWorkers(&context, v1::ListWorkersRequest(), &response);
  if (!status.ok()) return Report(status);
  std::cout << absl::StrFormat("%-24s %-22s %-11s %14s %8s %14s %8s %8s %-9s %s\n", "WORKER", "ID",
                               "HEALTH", "FREE/TOTAL", "CACHED", "HOST CACHED", "RUNNING",
                               "WAITING", "INDEX", "KV TRANSFER");
  for (const v1::WorkerInfo& worker : response.workers()) {
    std::string health = absl::AsciiStrToLower(
        absl::StripPrefix(v1::WorkerHealth_Name(worker.health()), "WORKER_HEALTH_"));
    const std::string host =
        worker.host_blocks() > 0
            ? absl::StrFormat("%d/%d", worker.host_cached_blocks(), worker.host_blocks())
            : "-";
    std::cout << absl::StrFormat("%-24s %-22s %-11s %6d/%-7d %8d %14s %8d %8d %-9s %s\n",
                                 worker.address(), worker.id().empty() ? "-" : worker.id(), health,
                                 worker.free_blocks(), worker.total_blocks(),
                                 worker.cached_blocks(), host, worker.running_requests(),
                                 worker.waiting_requests(), worker.index_state(),
                                 worker.kv_transfer_format().empty() ? "-" : "yes");
  }
  for (const v1::WorkerInfo& worker : response.workers()) {
    if (!worker.refused_reason().empty()) {
      std::cout << worker.address() << " refused: " << worker.refused_reason() << "\n";
    }
  }
  return 0;
}

// One row of the `workers` table from each worker's first status message(s).
int Workers() {
  std::vector<std::string> addresses =
      absl::StrSplit(absl::GetFlag(FLAGS_workers), ',', absl::SkipWhitespace());
  if (addresses.empty()) return RouterWorkers();
  std::cout << absl::StrFormat("%-24s %-22s %14s %8s %14s %8s %8s\n", "WORKER", "ID", "FREE/TOTAL",
                               "CACHED", "HOST CACHED", "RUNNING", "WAITING");
  int failures = 0;
  for (const std::string& address : addresses) {
    auto stub = v1::Worker::NewStub(Connect(address));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatusRequest request;
    request.set_router_id("kvserve-cli");
    std::unique_ptr<grpc::ClientReader<v1::WorkerStatus>> reader =
        stub->StreamStatus(&context, request);
    v1::WorkerStatus status;
    int64_t cached = 0;
    int64_t host_cached = 0;
    bool complete = false;
    v1::Capacity capacity;
    std::string id;
    while (!complete && reader->Read(&status)) {
      capacity = status.capacity();
      id = status.identity().worker_id();
      for (const v1::StoredBlock& block : status.snapshot().blocks()) {
        ++(block.tier() == v1::KV_TIER_DEVICE ? cached : host_cached);
      }
      complete = status.snapshot().last_part();
    }
    context.TryCancel();
    while (reader->Read(&status)) {
    }
    grpc::Status finished = reader->Finish();
    if (!complete) {
      std::cout << absl::StrFormat("%-24s unreachable: %s\n", address, finished.error_message());
      ++failures;
      continue;
    }
    const std::string host = capacity.host_blocks() > 0
                                 ? absl::StrFormat("%d/%d", host_cached, capacity.host_blocks())
                                 : "-";
    std::cout << absl::StrFormat("%-24s %-22s %6d/%-7d %8d %14s %8d %8d\n", address, id,
                                 capacity.free_blocks(), capacity.total_blocks(), cached, host,
                                 capacity.running_requests(), capacity.waiting_requests());
  }
  return failures == 0 ? 0 : 1;
}

// Waits until the target serves: GetModelInfo succeeds (a router answers it once a worker has
// reported its model), retrying until --timeout_s passes. For scripts (scripts/run_cluster.sh).
int Wait() {
  auto stub = v1::Generation::NewStub(Connect(absl::GetFlag(FLAGS_target)));
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(absl::GetFlag(FLAGS_timeout_s) * 1000));
  grpc::Status status;
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext context;
    Prepare(&context);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    v1::ModelInfo info;
    status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &info);
    if (status.ok()) {
      std::cout << absl::GetFlag(FLAGS_target) << " serves " << info.name() << std::endl;
      return 0;
    }
    if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Report(status.ok() ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "not ready")
                            : status);
}

int Usage() {
  std::cerr << "usage: kvserve-cli generate|chat|tokenize TEXT | kvserve-cli workers "
               "[--workers=host:port,...] | kvserve-cli wait  (--help for flags)"
            << std::endl;
  return 2;
}

int Main(const std::vector<char*>& args) {
  if (args.size() < 2) return Usage();
  const std::string command = args[1];
  const std::string text =
      args.size() > 2 ? absl::StrJoin(args.begin() + 2, args.end(), " ") : std::string();
  if (command == "workers") return Workers();
  if (command == "wait") return Wait();
  if (args.size() < 3) return Usage();
  if (command == "generate") {
    v1::GenerateRequest request;
    request.set_prompt(text);
    return Generate(std::move(request));
  }
  if (command == "chat") {
    v1::GenerateRequest request;
    if (!absl::GetFlag(FLAGS_system).empty()) {
      v1::ChatMessage* system = request.mutable_chat()->add_messages();
      system->set_role("system");
      system->set_content(absl::GetFlag(FLAGS_system));
    }
    v1::ChatMessage* user = request.mutable_chat()->add_messages();
    user->set_role("user");
    user->set_content(text);
    return Generate(std::move(request));
  }
  if (command == "tokenize") return Tokenize(text);
  return Usage();
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  kvserve::SetProgramUsage("kvserve-cli generate|chat|tokenize TEXT, workers, or wait");
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  return kvserve::Main(args);
}
