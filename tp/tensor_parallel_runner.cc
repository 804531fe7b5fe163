#include "tp/tensor_parallel_runner.h"

#include <algorithm>
#include <cstring>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

constexpr size_t kLengthBytes = sizeof(uint32_t);
constexpr size_t kFramePayload = kTpFrameBytes - kLengthBytes;

// Receives one message from rank 0 (the follower's side of TensorParallelRunner::Send).
absl::StatusOr<TpMessage> Receive(Communicator& comm, std::string& frame) {
  frame.assign(kTpFrameBytes, '\0');
  KVSERVE_RETURN_IF_ERROR(comm.Broadcast(frame.data(), kTpFrameBytes, 0));
  uint32_t length = 0;
  std::memcpy(&length, frame.data(), kLengthBytes);
  frame.resize(kLengthBytes + std::max<size_t>(length, kFramePayload));
  if (length > kFramePayload) {
    if (absl::Status status =
            comm.Broadcast(frame.data() + kTpFrameBytes, length - kFramePayload, 0);
        !status.ok()) {
      return status;
    }
  }
  return DecodeTpMessage(std::string_view(frame).substr(kLengthBytes, length));
}

// Every rank's int64 (AllGather), in rank order.
absl::StatusOr<std::vector<int64_t>> GatherInt64(Communicator& comm, int64_t value) {
  std::vector<int64_t> all(comm.size());
  KVSERVE_RETURN_IF_ERROR(comm.AllGather(&value, all.data(), sizeof(value)));
  return all;
}

// After Initialize: every rank's decode-graph count (-1 where Initialize failed). Ranks replay
// graphs together or not at all (ModelRunner::DropDecodeGraphs says why), so when the ranks that
// initialised disagree (a rank whose capture failed runs eagerly), every rank drops its graphs.
// True when this rank dropped them.
bool AgreeOnDecodeGraphs(ModelRunner& runner, const std::vector<int64_t>& graphs) {
  for (int64_t count : graphs) {
    if (count >= 0 && count != graphs[0]) {
      runner.DropDecodeGraphs();
      return true;
    }
  }
  return false;
}

}  // namespace

TensorParallelRunner::TensorParallelRunner(std::unique_ptr<ModelRunner> runner,
                                           Communicator* control, TimedCommunicator* data,
                                           absl::Duration keepalive_interval)
    : runner_(std::move(runner)),
      control_(control),
      data_(data),
      keepalive_interval_(keepalive_interval) {
  {
    absl::MutexLock lock(&mu_);
    last_send_ = absl::Now();
  }
  keepalive_thread_ = std::thread([this] { KeepAliveLoop(); });
}

TensorParallelRunner::~TensorParallelRunner() { Stop(); }

absl::Status TensorParallelRunner::Fail(absl::Status status) {
  if (failure_.ok() && !status.ok()) {
    failure_ = absl::Status(
        status.code(),
        absl::StrCat("tensor-parallel group of ", control_->size(), " ranks: ", status.message()));
    failed_.store(true, std::memory_order_release);
  }
  return failure_.ok() ? status : failure_;
}

absl::Status TensorParallelRunner::failure() const {
  absl::MutexLock lock(&mu_);
  return failure_;
}

void TensorParallelRunner::SetStepSink(TpStepSink sink) {
  absl::MutexLock lock(&mu_);
  sink_ = std::move(sink);
}

absl::Status TensorParallelRunner::Send(const std::function<void(std::string*)>& encode) {
  if (!failure_.ok()) return failure_;
  if (stopped_) return absl::FailedPreconditionError("the tensor-parallel group was stopped");
  frame_.assign(kLengthBytes, '\0');
  encode(&frame_);
  const uint32_t length = static_cast<uint32_t>(frame_.size() - kLengthBytes);
  std::memcpy(frame_.data(), &length, kLengthBytes);
  if (frame_.size() < kTpFrameBytes) frame_.resize(kTpFrameBytes, '\0');
  last_send_ = absl::Now();
  if (absl::Status status = control_->Broadcast(frame_.data(), kTpFrameBytes, 0); !status.ok()) {
    return Fail(status);
  }
  if (frame_.size() > kTpFrameBytes) {
    if (absl::Status status =
            control_->Broadcast(frame_.data() + kTpFrameBytes, frame_.size() - kTpFrameBytes, 0);
        !status.ok()) {
      return Fail(status);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> TensorParallelRunner::ProfileKvBytes(const RunnerConfig& config) {
  absl::MutexLock lock(&mu_);
  if (absl::Status status =
          Send([&](std::string* out) { EncodeTpMessage(TpCommand::kProfile, config, out); });
      !status.ok()) {
    return status;
  }
  absl::StatusOr<int64_t> own = runner_->ProfileKvBytes(config);
  absl::StatusOr<std::vector<int64_t>> all = GatherInt64(*control_, own.ok() ? *own : -1);
  if (!all.ok()) return Fail(all.status());
  if (!own.ok()) return own.status();
  for (size_t rank = 1; rank < all->size(); ++rank) {
    if ((*all)[rank] < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("tensor-parallel rank ", rank, " could not size its KV pool (see its log)"));
    }
  }
  return *std::min_element(all->begin(), all->end());
}

absl::Status TensorParallelRunner::Initialize(const RunnerConfig& config) {
  absl::MutexLock lock(&mu_);
  if (absl::Status status =
          Send([&](std::string* out) { EncodeTpMessage(TpCommand::kInitialize, config, out); });
      !status.ok()) {
    return status;
  }
  const absl::Status own = runner_->Initialize(config);
  absl::StatusOr<std::vector<int64_t>> all =
      GatherInt64(*control_, own.ok() ? runner_->num_decode_graphs() : -1);
  if (!all.ok()) return Fail(all.status());
  if (!own.ok()) return own;
  for (size_t rank = 1; rank < all->size(); ++rank) {
    if ((*all)[rank] < 0) {
      return absl::InternalError(absl::StrCat("tensor-parallel rank ", rank,
                                              " could not initialize its runner with ",
                                              config.num_blocks, " KV blocks (see its log)"));
    }
  }
  if (AgreeOnDecodeGraphs(*runner_, *all)) {
    std::cerr << "kvserve-worker: the tensor-parallel ranks captured different numbers of decode "
                 "graphs ("
              << absl::StrJoin(*all, ", ") << "): every rank runs eagerly" << std::endl;
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> TensorParallelRunner::Execute(const StepPlan& plan) {
  absl::MutexLock lock(&mu_);
  const absl::Time start = absl::Now();
  KVSERVE_RETURN_IF_ERROR(Send([&](std::string* out) { EncodeTpMessage(plan, out); }));
  const absl::Duration broadcast = absl::Now() - start;
  data_->TakeAllReduceTime();
  absl::StatusOr<StepResult> result = runner_->Execute(plan);
  const absl::Duration all_reduce = data_->TakeAllReduceTime();
  if (!result.ok()) {
    // A collective error is the group's; anything else is this rank's alone, but the followers
    // are now a step ahead or behind: the group cannot go on either way.
    return Fail(result.status());
  }
  if (sink_) sink_(broadcast, all_reduce);
  return result;
}

void TensorParallelRunner::Stop(bool notify_followers) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      if (notify_followers && failure_.ok()) Send(TpCommand::kStop).IgnoreError();
      stopped_ = true;
    }
  }
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
}

void TensorParallelRunner::KeepAliveLoop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    mu_.AwaitWithTimeout(absl::Condition(&stopped_), keepalive_interval_);
    if (stopped_ || !failure_.ok()) return;
    if (absl::Now() - last_send_ >= keepalive_interval_) {
      Send(TpCommand::kKeepAlive).IgnoreError();  // a failure is kept in failure_
    }
  }
}

absl::Status RunTensorParallelFollower(ModelRunner& runner, Communicator& control) {
  KVSERVE_RETURN_IF_ERROR(runner.BindThread());
  std::string frame;
  while (true) {
    KVSERVE_ASSIGN_OR_RETURN(TpMessage message, Receive(control, frame));
    switch (message.command) {
      case TpCommand::kKeepAlive:
        break;
      case TpCommand::kStop:
        return absl::OkStatus();
      case TpCommand::kProfile: {
        absl::StatusOr<int64_t> bytes = runner.ProfileKvBytes(message.config);
        absl::StatusOr<std::vector<int64_t>> all = GatherInt64(control, bytes.ok() ? *bytes : -1);
        if (!bytes.ok()) return bytes.status();
        if (!all.ok()) return all.status();
        break;
      }
      case TpCommand::kInitialize: {
        const absl::Status status = runner.Initialize(message.config);
        absl::StatusOr<std::vector<int64_t>> all =
            GatherInt64(control, status.ok() ? runner.num_decode_graphs() : -1);
        if (!status.ok()) return status;
        if (!all.ok()) return all.status();
        AgreeOnDecodeGraphs(runner, *all);
        break;
      }
      case TpCommand::kExecute: {
        KVSERVE_ASSIGN_OR_RETURN(StepResult result, runner.Execute(message.plan));
        break;
      }
    }
  }
}

}  // namespace kvserve
