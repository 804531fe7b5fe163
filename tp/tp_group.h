// TpGroup: the process side of a tensor-parallel worker group, for kvserve-worker's main
// (docs/architecture.md, "The worker group").
//
// Launch. The leader (rank 0) starts the group's rendezvous store, on 127.0.0.1 at a free port
// when --tp_leader_address is empty, and then spawns ranks 1..N-1 (FollowerProcesses) with its
// own arguments plus --tp_rank=r, --tp_leader_address=<the store>, --tp_hostname=127.0.0.1, its
// share of the CPU threads and, on CUDA, device cuda:<first + r>. With --tp_leader_address set,
// the store listens there and the followers are started by hand (a group across hosts). Every
// rank then joins the Gloo communicator (bounded by --tp_timeout_s), which carries the leader's
// messages and, on the CPU, the model's all-reduces; on CUDA the runner factory then makes an
// NCCL communicator on the rank's backend (through the same store) for the model. Each rank
// loads only its shard.
//
// Serving. The leader's runner becomes a TensorParallelRunner (tensor_parallel_runner.h) that
// sends each step to the followers; its broadcast and all-reduce times go to a sink (the worker's
// metrics). A follower serves nothing: RunTensorParallelFollowerProcess runs the leader's messages
// until it is told to stop (OK) or a collective fails (its error).
//
// Failure and stop. Health() turns non-OK when a spawned follower has exited or a collective
// failed; main then drains with no grace (in-flight requests end UNAVAILABLE), Kill()s the
// followers (SIGTERM, then SIGKILL) and exits 1. On SIGTERM, main drains and then Stop()s the
// group: the followers are told to exit and every rank exits 0.
//
// A group of one (the default) is the plain worker: every method is a no-op.
// Thread-safety: main's thread only.
#ifndef KVSERVE_TP_TP_GROUP_H_
#define KVSERVE_TP_TP_GROUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/store_server.h"
#include "comm/timed_communicator.h"
#include "engine/model_runner.h"
#include "runner/runner_factory.h"
#include "tp/follower_processes.h"
#include "tp/tensor_parallel_runner.h"

namespace kvserve {

struct TpGroupOptions {
  int32_t size = 1;            // --tensor_parallel_size
  int32_t rank = 0;            // --tp_rank
  std::string leader_address;  // --tp_leader_address
  std::string hostname;        // --tp_hostname
  double timeout_s = 30.0;     // --tp_timeout_s

  // INVALID_ARGUMENT naming the flag.
  absl::Status Validate() const;
  absl::Duration timeout() const { return absl::Seconds(timeout_s); }
};

class TpGroup {
 public:
  // The leader's side (REQUIRES: options.rank == 0, Validate OK). `args`: the leader's own
  // argv[1..], given to the followers it spawns. Errors: the store's, the spawn's, or the
  // communicator's (a follower that did not join within --tp_timeout_s is named).
  static absl::StatusOr<std::unique_ptr<TpGroup>> Start(const TpGroupOptions& options,
                                                        const RunnerFactoryOptions& runner,
                                                        const std::vector<std::string>& args);
  // Kill()s what is still running.
  ~TpGroup();

  // The leader's runner options: its shard of the group, its share of the threads, and (CUDA)
  // the NCCL communicator the factory makes on its backend. Call once.
  RunnerFactoryOptions RankOptions(RunnerFactoryOptions options);
  // The leader's runner as the engine must drive it (the TensorParallelRunner over `runner`).
  std::unique_ptr<ModelRunner> WrapRunner(std::unique_ptr<ModelRunner> runner);
  // Sends each step's broadcast and all-reduce times to `sink` (e.g. the worker's metrics; what
  // it captures must live until Stop/Kill). A group of one has no steps to report.
  void SetStepSink(TpStepSink sink);
  // OK while every rank runs; else what failed (FAILED_PRECONDITION naming the rank that exited,
  // or the collective's error).
  absl::Status Health();
  // Tells the followers to exit and waits for them (10 s, then Kill). True when every spawned
  // follower exited 0. REQUIRES: the engine stopped (no step in flight).
  bool Stop();
  // SIGTERM, then (after 5 s) SIGKILL to every spawned follower still running; reaps them.
  // The leader's runner sends nothing more. REQUIRES: the engine stopped.
  void Kill();

 private:
  TpGroup(const TpGroupOptions& options, int32_t threads_per_rank)
      : options_(options), threads_per_rank_(threads_per_rank) {}

  const TpGroupOptions options_;
  const int32_t threads_per_rank_;
  std::unique_ptr<StoreServer> store_;
  std::unique_ptr<FollowerProcesses> followers_;  // spawned ranks; null when started by hand
  std::string leader_address_;                    // the store's
  std::unique_ptr<Communicator> comm_;       // Gloo: the control messages; the model's on the CPU
  std::unique_ptr<Communicator> data_comm_;  // CUDA: NCCL, the model's all-reduces
  std::unique_ptr<TimedCommunicator> timed_comm_;  // the model's communicator, timed
  // Shared with the engine (through a forwarding runner), so that Stop and Kill may run after
  // the engine is gone; destroyed before the communicators it uses.
  std::shared_ptr<TensorParallelRunner> runner_;
};

// A follower's whole life (REQUIRES: options.rank > 0, Validate OK): join the group, load the
// shard of `runner` options, run the leader's messages. OK when the leader stopped the group.
absl::Status RunTensorParallelFollowerProcess(const TpGroupOptions& options,
                                              const RunnerFactoryOptions& runner);

}  // namespace kvserve

#endif  // KVSERVE_TP_TP_GROUP_H_
