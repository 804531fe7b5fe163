// The Gloo communicator with every rank its own process (comm_rank_helper), over TCP on
// loopback, as a tensor-parallel group runs: every collective check at 2, 3, 4 and 8 ranks; a
// rank that never joins (DEADLINE_EXCEEDED within the connect timeout); a peer killed with
// SIGKILL in the middle of an all-reduce (the survivors fail with UNAVAILABLE or
// DEADLINE_EXCEEDED within the timeout and refuse every later call); a peer frozen with
// SIGSTOP (the same, by the timeout). No case can hang: every child is waited for with a
// deadline and killed past it.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace kvserve {
namespace {

constexpr int kUnavailableExit = 10 + static_cast<int>(absl::StatusCode::kUnavailable);
constexpr int kDeadlineExit = 10 + static_cast<int>(absl::StatusCode::kDeadlineExceeded);

// One child process; killed (SIGKILL) and reaped on destruction if still running.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], nullptr, nullptr, argv.data(), environ) != 0) pid_ = -1;
  }
  ~Child() {
    if (pid_ > 0 && !exit_status_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  void Signal(int signal) const { kill(pid_, signal); }

  // The raw wait status once the child has ended, or nullopt if it still runs at `deadline`.
  std::optional<int> WaitUntil(absl::Time deadline) {
    while (!exit_status_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_status_ = status;
      } else if (absl::Now() >= deadline) {
        return std::nullopt;
      } else {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    return exit_status_;
  }
  // The exit code, or -1 when the child was killed by a signal or still runs at `deadline`.
  int ExitCodeBy(absl::Time deadline) {
    std::optional<int> status = WaitUntil(deadline);
    return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
};

bool WaitForFile(const std::string& path, absl::Time deadline) {
  while (!std::filesystem::exists(path)) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// A group of comm_rank_helper processes: rank 0 first (it starts the store on a free port and
// writes it down), then the followers with the leader's address.
class ProcessGroup {
 public:
  ProcessGroup() {
    char pattern[] = "/tmp/kvserve_comm_test_XXXXXX";
    dir_ = mkdtemp(pattern) != nullptr ? pattern : "";
  }
  ~ProcessGroup() {
    ranks_.clear();  // kills and reaps what still runs
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Starts `ranks` (a subset of 0..size-1 that includes 0) of a group of `size`. False when
  // rank 0 did not publish its port within 20 s.
  bool Start(int size, const std::vector<int>& ranks, const std::string& scenario, int timeout_ms,
             int connect_timeout_ms = 30000) {
    ranks_.resize(size);
    const std::string port_file = dir_ + "/port";
    ranks_[0] = std::make_unique<Child>(Args(0, size, "127.0.0.1:0", scenario, timeout_ms,
                                             connect_timeout_ms, {"--port_file=" + port_file}));
    if (!ranks_[0]->started() || !WaitForFile(port_file, absl::Now() + absl::Seconds(20))) {
      return false;
    }
    std::string port;
    std::ifstream(port_file) >> port;
    for (int rank : ranks) {
      if (rank == 0) continue;
      ranks_[rank] = std::make_unique<Child>(
          Args(rank, size, "127.0.0.1:" + port, scenario, timeout_ms, connect_timeout_ms, {}));
      if (!ranks_[rank]->started()) return false;
    }
    return true;
  }

  Child& rank(int r) { return *ranks_[r]; }
  std::string ReadyFile(int rank) const { return dir_ + "/ready" + std::to_string(rank); }

 private:
  std::vector<std::string> Args(int rank, int size, const std::string& leader,
                                const std::string& scenario, int timeout_ms, int connect_timeout_ms,
                                std::vector<std::string> extra) const {
    std::vector<std::string> args = {KVSERVE_COMM_RANK_HELPER,
                                     "--rank=" + std::to_string(rank),
                                     "--size=" + std::to_string(size),
                                     "--leader=" + leader,
                                     "--scenario=" + scenario,
                                     "--timeout_ms=" + std::to_string(timeout_ms),
                                     "--connect_timeout_ms=" + std::to_string(connect_timeout_ms),
                                     "--ready_file=" + ReadyFile(rank)};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::string dir_;
  std::vector<std::unique_ptr<Child>> ranks_;
};

std::vector<int> AllRanks(int size) {
  std::vector<int> ranks(size);
  for (int rank = 0; rank < size; ++rank) ranks[rank] = rank;
  return ranks;
}

class GlooProcessGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooProcessGroupTest, CollectivesGiveExactSumsRankOrderAndTheRootsBytes) {
  const int size = GetParam();
  ProcessGroup group;
  ASSERT_TRUE(group.Start(size, AllRanks(size), "checks", 20000));
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_EQ(group.rank(rank).ExitCodeBy(deadline), 0) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooProcessGroupTest, ::testing::Values(2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(GlooProcessTest, ARankThatNeverStartsFailsTheOthersWithinTheConnectTimeout) {
  ProcessGroup group;
  const absl::Time start = absl::Now();
  ASSERT_TRUE(group.Start(3, {0, 1}, "checks", 20000, /*connect_timeout_ms=*/1500));
  const absl::Time deadline = start + absl::Seconds(15);
  EXPECT_EQ(group.rank(0).ExitCodeBy(deadline), kDeadlineExit);
  EXPECT_EQ(group.rank(1).ExitCodeBy(deadline), kDeadlineExit);
}

// Runs `size` ranks all-reducing in a loop, then hits `victim` with `signal` once every rank
// has finished one all-reduce: every other rank must end with UNAVAILABLE or DEADLINE_EXCEEDED
// within the collective timeout (plus slack for process exit), never hang.
void ExpectSurvivorsFail(int size, int victim, int signal) {
  const int timeout_ms = 2000;
  ProcessGroup group;
  ASSERT_TRUE(group.Start(size, AllRanks(size), "loop", timeout_ms));
  for (int rank = 0; rank < size; ++rank) {
    ASSERT_TRUE(WaitForFile(group.ReadyFile(rank), absl::Now() + absl::Seconds(60)))
        << "rank " << rank << " never completed an all-reduce";
  }
  absl::SleepFor(absl::Milliseconds(50));
  group.rank(victim).Signal(signal);
  const absl::Time signalled = absl::Now();
  const absl::Time deadline = signalled + absl::Milliseconds(timeout_ms) + absl::Seconds(8);
  for (int rank = 0; rank < size; ++rank) {
    if (rank == victim) continue;
    const int code = group.rank(rank).ExitCodeBy(deadline);
    EXPECT_TRUE(code == kUnavailableExit || code == kDeadlineExit)
        << "rank " << rank << " exited with " << code << " (-1: still running or killed)";
  }
  std::printf("victim rank %d of %d (signal %d): survivors ended %.2f s after it\n", victim, size,
              signal, absl::ToDoubleSeconds(absl::Now() - signalled));
}

TEST(GlooProcessTest, AFollowerKilledMidAllReduceFailsTheOthersThenEveryCall) {
  ExpectSurvivorsFail(3, 2, SIGKILL);
}

TEST(GlooProcessTest, TheLeaderKilledMidAllReduceFailsTheOthersThenEveryCall) {
  ExpectSurvivorsFail(4, 0, SIGKILL);
}

TEST(GlooProcessTest, AFrozenPeerFailsTheOthersByTheTimeout) { ExpectSurvivorsFail(2, 1, SIGSTOP); }

}  // namespace
}  // namespace kvserve
