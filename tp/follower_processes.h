// FollowerProcesses: the follower ranks a tensor-parallel leader starts on its own host, each a
// child process running this same binary (/proc/self/exe) with the leader's arguments plus its
// own (--tp_rank=r, ...). Children are made with fork + exec so that, before the exec, each can
// ask the kernel to SIGKILL it when the leader dies (PR_SET_PDEATHSIG, kept across exec), and
// moves to its own process group, so a Ctrl-C meant for the leader does not cut the group
// before the leader drains it. No follower outlives the leader.
//
// Thread-safety: one thread (main). Spawn must run on the thread that lives as long as the
// process (the death signal follows the thread that forked).
#ifndef KVSERVE_TP_FOLLOWER_PROCESSES_H_
#define KVSERVE_TP_FOLLOWER_PROCESSES_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve {

class FollowerProcesses {
 public:
  // Starts one child per entry of `args_per_rank` (argv[1..] of each). UNAVAILABLE naming the
  // rank when fork fails (the children started so far are stopped).
  static absl::StatusOr<std::unique_ptr<FollowerProcesses>> Spawn(
      const std::vector<std::vector<std::string>>& args_per_rank);
  // Terminate(5 s) unless every child was reaped.
  ~FollowerProcesses();

  FollowerProcesses(const FollowerProcesses&) = delete;
  FollowerProcesses& operator=(const FollowerProcesses&) = delete;

  // Reaps children that have exited without waiting; a description of the first one that did
  // ("rank 2 (pid 123) was killed by signal 9"), or nullopt while all run.
  std::optional<std::string> PollExited();
  // Waits up to `timeout` for every child to exit; true when all exited with status 0.
  bool WaitAll(absl::Duration timeout);
  // SIGTERM to every child still running, up to `grace` for them to exit, then SIGKILL; reaps
  // all of them.
  void Terminate(absl::Duration grace);
  std::vector<pid_t> pids() const;

 private:
  struct Child {
    int rank = 0;
    pid_t pid = -1;
    bool reaped = false;
    int status = 0;  // waitpid's, once reaped
  };
  FollowerProcesses() = default;
  // waitpid(WNOHANG) on every child not yet reaped.
  void Reap();
  static std::string Describe(const Child& child);

  std::vector<Child> children_;
};

}  // namespace kvserve

#endif  // KVSERVE_TP_FOLLOWER_PROCESSES_H_
