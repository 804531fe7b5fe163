// The control plane of a tensor-parallel worker group (docs/architecture.md, "The worker
// group"): the leader's TensorParallelRunner and the followers' RunTensorParallelFollower loop.
//
// The leader's engine drives a TensorParallelRunner like any ModelRunner. Each call that needs
// the whole group (ProfileKvBytes, Initialize, Execute) first sends a message (tp_messages.h) to
// every follower over the group's own communicator, then runs the leader's rank-0 runner; the
// followers run the same call on their shard, so the model's all-reduces meet. Only the leader
// samples. The KV pool is sized once, by the leader: ProfileKvBytes gathers every rank's budget
// and takes the smallest, and Initialize sends the leader's block count, so every rank holds the
// same number of blocks and the leader's block tables hold everywhere.
//
// Two communicators of the same group: `control` carries the messages (host buffers: Gloo, on
// every device) and `data` is the model's (the same Gloo one on the CPU, NCCL on CUDA); the
// leader times the model's all-reduces on `data`.
//
// Wire: a message is broadcast from rank 0 in a frame of kTpFrameBytes (a 4-byte length, then
// the message); a message longer than the frame (a plan with long prompts) sends its rest in a
// second broadcast. One collective per decode step, and no second channel to set up, watch and
// time out: the group's data plane already detects a dead or frozen rank.
//
// Idle: every collective is bounded by the group's timeout (--tp_timeout_s), and the followers
// wait for the next message in a broadcast; so while the engine has nothing to run, a thread of
// the leader sends a keep-alive message every `keepalive_interval`.
//
// Failure: the first collective error (a follower died: UNAVAILABLE; one froze: DEADLINE_EXCEEDED)
// fails the call that met it and every later one, and failed() turns true, so that the process
// can stop the group. A follower returns from its loop on any error, and exits.
//
// Thread-safety: the ModelRunner calls from the engine thread; Stop, failed, failure and
// SetStepSink from any thread.
#ifndef KVSERVE_TP_TENSOR_PARALLEL_RUNNER_H_
#define KVSERVE_TP_TENSOR_PARALLEL_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "comm/timed_communicator.h"
#include "engine/model_runner.h"
#include "tp/tp_messages.h"

namespace kvserve {

inline constexpr size_t kTpFrameBytes = 4096;

// Called after each step with the plan broadcast time and the step's all-reduce time.
using TpStepSink = std::function<void(absl::Duration broadcast, absl::Duration all_reduce)>;

class TensorParallelRunner final : public ModelRunner {
 public:
  // KV block transfer is not offered (ModelRunner's empty KvTransferFormat): every rank holds a
  // slice of each block, and a transfer would have to gather and scatter them across the group.
  // runner: the leader's (rank 0) runner, whose model all-reduces over `data`; `control`
  // carries the messages (both borrowed; they must outlive this; they may be one object).
  // Starts the keep-alive thread.
  TensorParallelRunner(std::unique_ptr<ModelRunner> runner, Communicator* control,
                       TimedCommunicator* data, absl::Duration keepalive_interval);
  // Stop()s.
  ~TensorParallelRunner() override;

  int32_t vocab_size() const override { return runner_->vocab_size(); }
  int32_t max_context_len() const override { return runner_->max_context_len(); }
  std::vector<int32_t> eos_token_ids() const override { return runner_->eos_token_ids(); }
  int64_t KvBytesPerBlock(int32_t block_size) const override {
    return runner_->KvBytesPerBlock(block_size);
  }
  // The leader's runner's (each follower binds its own thread in RunTensorParallelFollower).
  absl::Status BindThread() override { return runner_->BindThread(); }
  int32_t num_decode_graphs() const override { return runner_->num_decode_graphs(); }
  // The smallest budget over the ranks.
  absl::StatusOr<int64_t> ProfileKvBytes(const RunnerConfig& config) override;
  absl::Status Initialize(const RunnerConfig& config) override;
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override;

  // Tells the followers to exit (when `notify_followers` and the group has not failed) and stops
  // the keep-alive thread. Later calls fail. Idempotent.
  void Stop(bool notify_followers = true);
  // The group is broken (a rank died): aborts the data communicator (Communicator::Abort), so
  // a step waiting on the dead rank, a replayed decode graph's NCCL kernels included, ends now
  // instead of never. Thread-safe: the group's watchdog calls it while a step may be running.
  void AbortCollectives() { data_->Abort(); }
  // True once a collective failed (the group is broken and must stop).
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  absl::Status failure() const;
  void SetStepSink(TpStepSink sink);

 private:
  // Broadcasts the message `encode` appends (tp_messages.h) to the followers.
  absl::Status Send(const std::function<void(std::string*)>& encode)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Send(TpCommand command) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return Send([command](std::string* out) { EncodeTpMessage(command, out); });
  }
  // Records the first group error; returns `status`.
  absl::Status Fail(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KeepAliveLoop();

  std::unique_ptr<ModelRunner> runner_;
  Communicator* const control_;
  TimedCommunicator* const data_;
  const absl::Duration keepalive_interval_;
  std::thread keepalive_thread_;
  std::atomic<bool> failed_{false};

  // Guards the communicators: one message or step at a time.
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_send_ ABSL_GUARDED_BY(mu_);
  std::string frame_ ABSL_GUARDED_BY(mu_);
  TpStepSink sink_ ABSL_GUARDED_BY(mu_);
};

// A follower's life after it joined the group and loaded its shard: receive each message from
// rank 0 over `control` and run it on `runner` until kStop (then OK). Returns the first error: a
// collective's (the leader or another rank is gone or frozen), or the runner's.
absl::Status RunTensorParallelFollower(ModelRunner& runner, Communicator& control);

}  // namespace kvserve

#endif  // KVSERVE_TP_TENSOR_PARALLEL_RUNNER_H_
