// comm_rank_helper: one rank of a Gloo group as its own process, for gloo_process_test.
//   comm_rank_helper --rank=R --size=N --leader=HOST:PORT [--port_file=PATH] --scenario=S
//                    [--timeout_ms=T] [--connect_timeout_ms=T] [--ready_file=PATH]
// Rank 0 with --port_file starts the store on --leader (port 0: any) and writes its port to
// PATH before joining, so the test can start the followers with it.
// Scenarios:
//   checks  every collective check (tests/comm/collective_checks.h); exit 0 when all pass.
//   loop    all-reduces of 1M floats until one fails (touching --ready_file once the first
//           completed); then checks that a later call gives the same error, and exits with
//           10 + the error's code (24 UNAVAILABLE, 14 DEADLINE_EXCEEDED), 3 if a later call
//           was not refused with it.
// Exit 1 when the group could not be formed (the status on stderr; 10 + code when it is
// DEADLINE_EXCEEDED or UNAVAILABLE), 2 for bad flags.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "comm/gloo_communicator.h"
#include "comm/store_server.h"
#include "tests/comm/collective_checks.h"

namespace kvserve {
namespace {

struct Flags {
  int rank = -1;
  int size = 0;
  std::string leader;
  std::string port_file;
  std::string scenario;
  int timeout_ms = 5000;
  int connect_timeout_ms = 30000;
  std::string ready_file;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    const size_t equals = arg.find('=');
    if (arg.substr(0, 2) != "--" || equals == std::string_view::npos) return false;
    const std::string_view name = arg.substr(2, equals - 2), value = arg.substr(equals + 1);
    bool ok = true;
    if (name == "rank")
      ok = absl::SimpleAtoi(std::string(value), &flags->rank);
    else if (name == "size")
      ok = absl::SimpleAtoi(std::string(value), &flags->size);
    else if (name == "timeout_ms")
      ok = absl::SimpleAtoi(std::string(value), &flags->timeout_ms);
    else if (name == "connect_timeout_ms")
      ok = absl::SimpleAtoi(std::string(value), &flags->connect_timeout_ms);
    else if (name == "leader")
      flags->leader = std::string(value);
    else if (name == "port_file")
      flags->port_file = std::string(value);
    else if (name == "scenario")
      flags->scenario = std::string(value);
    else if (name == "ready_file")
      flags->ready_file = std::string(value);
    else
      return false;
    if (!ok) return false;
  }
  return flags->rank >= 0 && flags->size > 0 && !flags->leader.empty() &&
         (flags->scenario == "checks" || flags->scenario == "loop");
}

// Written to a temporary name and renamed, so a reader never sees half a file.
bool WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << contents;
    if (!out) return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

int FailureExitCode(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnavailable ||
      status.code() == absl::StatusCode::kDeadlineExceeded) {
    return 10 + static_cast<int>(status.code());
  }
  return 1;
}

int RunLoop(Communicator& communicator, const std::string& ready_file) {
  const int64_t count = 1 << 20;
  std::vector<float> data(count, 1.0f);
  absl::Status status;
  for (int64_t iteration = 0; status.ok(); ++iteration) {
    status = communicator.AllReduceSum(data.data(), count, kernels::DType::kF32);
    std::fill(data.begin(), data.end(), 1.0f);
    if (iteration == 0 && status.ok() && !ready_file.empty()) WriteFileAtomically(ready_file, "");
  }
  std::fprintf(stderr, "rank %d: %s\n", communicator.rank(), status.ToString().c_str());
  if (communicator.AllReduceSum(data.data(), count, kernels::DType::kF32) != status ||
      communicator.Barrier() != status) {
    std::fprintf(stderr, "rank %d: a call after the error was not refused with it\n",
                 communicator.rank());
    return 3;
  }
  return FailureExitCode(status);
}

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: comm_rank_helper --rank=R --size=N --leader=HOST:PORT "
                 "--scenario=checks|loop [--port_file=P] [--timeout_ms=T] "
                 "[--connect_timeout_ms=T] [--ready_file=P]\n");
    return 2;
  }
  CommOptions options;
  options.rank = flags.rank;
  options.size = flags.size;
  options.leader_address = flags.leader;
  options.timeout = absl::Milliseconds(flags.timeout_ms);
  options.connect_timeout = absl::Milliseconds(flags.connect_timeout_ms);
  options.hostname = "127.0.0.1";
  std::unique_ptr<StoreServer> server;
  if (flags.rank == 0 && !flags.port_file.empty()) {
    absl::StatusOr<std::unique_ptr<StoreServer>> started = StoreServer::Start(flags.leader);
    if (!started.ok()) {
      std::fprintf(stderr, "rank 0: %s\n", started.status().ToString().c_str());
      return 1;
    }
    server = std::move(*started);
    options.server = server.get();
    if (!WriteFileAtomically(flags.port_file, std::to_string(server->port()))) return 1;
  }
  absl::StatusOr<std::unique_ptr<Communicator>> communicator = CreateGlooCommunicator(options);
  if (!communicator.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", flags.rank, communicator.status().ToString().c_str());
    return FailureExitCode(communicator.status());
  }
  server.reset();  // the group is formed: nobody reads the store any more
  if (flags.scenario == "loop") return RunLoop(**communicator, flags.ready_file);
  absl::Status checked = testing::RunCollectiveChecks(**communicator);
  if (!checked.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", flags.rank, checked.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) { return kvserve::Main(argc, argv); }
