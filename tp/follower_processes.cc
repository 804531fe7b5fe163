#include "tp/follower_processes.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace kvserve {
absl::StatusOr<std::unique_ptr<FollowerProcesses>> FollowerProcesses::Spawn(
    const std::vector<std::vector<std::string>>& args_per_rank) {
  std::unique_ptr<FollowerProcesses> group(new FollowerProcesses);
  const pid_t leader = getpid();
  for (size_t i = 0; i < args_per_rank.size(); ++i) {
    // argv is built before the fork: the child only calls async-signal-safe functions.
    std::vector<std::string> strings = {"/proc/self/exe"};
    strings.insert(strings.end(), args_per_rank[i].begin(), args_per_rank[i].end());
    std::vector<char*> argv;
    for (std::string& s : strings) argv.push_back(s.data());
    argv.push_back(nullptr);

    const pid_t pid = fork();
    if (pid < 0) {
      const int error = errno;
      group->Terminate(absl::Seconds(5));
      return absl::UnavailableError(
          absl::StrCat("cannot start tensor-parallel rank ", i + 1, ": fork: ", strerror(error)));
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != leader) _exit(1);  // the leader died before the line above
      setpgid(0, 0);
      sigset_t none;  // the leader blocks SIGTERM / SIGINT for its sigwait; a follower must not
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    group->children_.push_back({.rank = static_cast<int>(i + 1), .pid = pid});
  }
  return group;
}

FollowerProcesses::~FollowerProcesses() { Terminate(absl::Seconds(5)); }

void FollowerProcesses::Reap() {
  for (Child& child : children_) {
    if (child.reaped) continue;
    int status = 0;
    const pid_t done = waitpid(child.pid, &status, WNOHANG);
    if (done == child.pid || (done < 0 && errno == ECHILD)) {
      child.reaped = true;
      child.status = done == child.pid ? status : 0;
    }
  }
}

std::string FollowerProcesses::Describe(const Child& child) {
  const std::string who =
      absl::StrCat("tensor-parallel rank ", child.rank, " (pid ", child.pid, ")");
  if (WIFSIGNALED(child.status)) {
    return absl::StrCat(who, " was killed by signal ", WTERMSIG(child.status));
  }
  return absl::StrCat(who, " exited with status ", WEXITSTATUS(child.status));
}

std::optional<std::string> FollowerProcesses::PollExited() {
  Reap();
  for (const Child& child : children_) {
    if (child.reaped) return Describe(child);
  }
  return std::nullopt;
}

bool FollowerProcesses::WaitAll(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    Reap();
    bool all_reaped = true;
    for (const Child& child : children_) all_reaped &= child.reaped;
    if (all_reaped) break;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (const Child& child : children_) {
    if (!WIFEXITED(child.status) || WEXITSTATUS(child.status) != 0) return false;
  }
  return true;
}

void FollowerProcesses::Terminate(absl::Duration grace) {
  Reap();
  for (const Child& child : children_) {
    if (!child.reaped) kill(child.pid, SIGTERM);
  }
  if (WaitAll(grace)) return;
  for (const Child& child : children_) {
    if (!child.reaped) kill(child.pid, SIGKILL);
  }
  for (Child& child : children_) {
    if (child.reaped) continue;
    int status = 0;
    if (waitpid(child.pid, &status, 0) == child.pid) child.status = status;
    child.reaped = true;
  }
}

std::vector<pid_t> FollowerProcesses::pids() const {
  std::vector<pid_t> pids;
  for (const Child& child : children_) pids.push_back(child.pid);
  return pids;
}

}  // namespace kvserve
