#include "tp/tp_group.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "comm/gloo_communicator.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/socket_io.h"
#include "kernels/backend_factory.h"

namespace kvserve {
namespace {

constexpr char kLocalHost[] = "127.0.0.1";

absl::Status FlagError(absl::string_view flag, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", message));
}

// Device of rank `rank` when rank 0 was given `device`: cuda:<first + rank> on CUDA.
std::string RankDevice(const std::string& device, int32_t rank) {
  if (!kernels::IsCudaDevice(device)) return device;
  int first = 0;
  const size_t colon = device.find(':');
  if (colon != std::string::npos) (void)absl::SimpleAtoi(device.substr(colon + 1), &first);
  return absl::StrCat("cuda:", first + rank);
}

CommOptions CommOptionsOf(const TpGroupOptions& options, std::string leader_address) {
  CommOptions comm;
  comm.rank = options.rank;
  comm.size = options.size;
  comm.leader_address = std::move(leader_address);
  comm.timeout = options.timeout();
  comm.connect_timeout = options.timeout();
  comm.hostname = options.hostname;
  return comm;
}

// The runner options of rank options.rank: its shard, its model's all-reduces timed through
// *timed. On the CPU they go over `gloo` (the control communicator too); on CUDA over an NCCL
// communicator made on the rank's backend once the factory has it, kept in *nccl. `store`:
// rank 0's rendezvous store (still running), null on the other ranks.
RunnerFactoryOptions ShardOptions(const TpGroupOptions& options, const std::string& leader_address,
                                  StoreServer* store, RunnerFactoryOptions runner,
                                  Communicator* gloo, std::unique_ptr<Communicator>* nccl,
                                  std::unique_ptr<TimedCommunicator>* timed) {
  runner.tensor_parallel = {.rank = options.rank, .size = options.size, .comm = nullptr};
  if (!kernels::IsCudaDevice(runner.device)) {
    *timed = std::make_unique<TimedCommunicator>(gloo);
    runner.tensor_parallel.comm = timed->get();
    return runner;
  }
  CommOptions comm = CommOptionsOf(options, leader_address);
  comm.server = store;
  runner.make_comm = [comm, nccl,
                      timed](kernels::Backend* backend) -> absl::StatusOr<Communicator*> {
    KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> made,
                             CreateNcclCommunicator(comm, backend));
    *nccl = std::move(made);
    *timed = std::make_unique<TimedCommunicator>(nccl->get());
    return timed->get();
  };
  return runner;
}

// The engine's handle on a runner the group shares.
class SharedRunner final : public ModelRunner {
 public:
  explicit SharedRunner(std::shared_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}

  int32_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t max_context_len() const override { return inner_->max_context_len(); }
  std::vector<int32_t> eos_token_ids() const override { return inner_->eos_token_ids(); }
  int64_t KvBytesPerBlock(int32_t block_size) const override {
    return inner_->KvBytesPerBlock(block_size);
  }
  absl::StatusOr<int64_t> ProfileKvBytes(const RunnerConfig& config) override {
    return inner_->ProfileKvBytes(config);
  }
  absl::Status Initialize(const RunnerConfig& config) override {
    return inner_->Initialize(config);
  }
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    return inner_->Execute(plan);
  }

 private:
  std::shared_ptr<ModelRunner> inner_;
};

}  // namespace

absl::Status TpGroupOptions::Validate() const {
  if (size < 1) return FlagError("tensor_parallel_size", absl::StrCat("must be >= 1, got ", size));
  if (rank < 0 || rank >= size) {
    return FlagError(
        "tp_rank", absl::StrCat("must be in [0, --tensor_parallel_size = ", size, "), got ", rank));
  }
  if (rank > 0 && leader_address.empty()) {
    return FlagError("tp_leader_address", "a follower (--tp_rank > 0) must be given the leader's");
  }
  if (!leader_address.empty()) {
    if (absl::StatusOr<net::HostPort> parsed = net::ParseHostPort(leader_address); !parsed.ok()) {
      return FlagError("tp_leader_address", parsed.status().message());
    }
  }
  if (!std::isfinite(timeout_s) || timeout_s <= 0) {
    return FlagError("tp_timeout_s", absl::StrCat("must be a finite number > 0, got ", timeout_s));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TpGroup>> TpGroup::Start(const TpGroupOptions& options,
                                                        const RunnerFactoryOptions& runner,
                                                        const std::vector<std::string>& args) {
  const int32_t total_threads =
      runner.num_threads > 0
          ? runner.num_threads
          : static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  // A group started by hand: each rank's --num_threads is its own.
  const bool spawn = options.leader_address.empty();
  const int32_t share =
      options.size > 1 && spawn ? std::max(1, total_threads / options.size) : runner.num_threads;
  std::unique_ptr<TpGroup> group(new TpGroup(options, share));
  if (options.size == 1) return group;

  TpGroupOptions leader = options;
  if (spawn && leader.hostname.empty()) leader.hostname = kLocalHost;
  absl::StatusOr<std::unique_ptr<StoreServer>> store =
      StoreServer::Start(spawn ? absl::StrCat(kLocalHost, ":0") : options.leader_address);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("--tp_leader_address: ", store.status().message()));
  }
  group->store_ = *std::move(store);
  const std::string address = group->store_->address();
  if (spawn) {
    std::vector<std::vector<std::string>> per_rank;
    for (int32_t rank = 1; rank < options.size; ++rank) {
      std::vector<std::string> rank_args = args;  // later flags override the leader's
      rank_args.push_back(absl::StrCat("--tp_rank=", rank));
      rank_args.push_back(absl::StrCat("--tp_leader_address=", address));
      rank_args.push_back(absl::StrCat("--tp_hostname=", leader.hostname));
      rank_args.push_back(absl::StrCat("--num_threads=", share));
      rank_args.push_back(absl::StrCat("--device=", RankDevice(runner.device, rank)));
      per_rank.push_back(std::move(rank_args));
    }
    absl::StatusOr<std::unique_ptr<FollowerProcesses>> followers =
        FollowerProcesses::Spawn(per_rank);
    if (!followers.ok()) return followers.status();
    group->followers_ = *std::move(followers);
  }
  CommOptions comm = CommOptionsOf(leader, address);
  comm.server = group->store_.get();
  absl::StatusOr<std::unique_ptr<Communicator>> joined = CreateGlooCommunicator(comm);
  if (!joined.ok()) {
    return absl::Status(joined.status().code(),
                        absl::StrCat("tensor-parallel group of ", options.size,
                                     " did not form: ", joined.status().message()));
  }
  group->comm_ = *std::move(joined);
  group->leader_address_ = address;
  std::cout << "kvserve-worker tensor_parallel_size=" << options.size << " leader=" << address;
  if (group->followers_ != nullptr) {
    std::cout << " follower_pids=" << absl::StrJoin(group->followers_->pids(), ",");
  }
  std::cout << std::endl;
  return group;
}

TpGroup::~TpGroup() { Kill(); }

RunnerFactoryOptions TpGroup::RankOptions(RunnerFactoryOptions options) {
  options.num_threads = threads_per_rank_;
  if (options_.size == 1) return options;
  return ShardOptions(options_, leader_address_, store_.get(), std::move(options), comm_.get(),
                      &data_comm_, &timed_comm_);
}

std::unique_ptr<ModelRunner> TpGroup::WrapRunner(std::unique_ptr<ModelRunner> runner) {
  if (options_.size == 1) return runner;
  const absl::Duration keepalive = std::min(absl::Seconds(1), options_.timeout() / 4);
  runner_ = std::make_shared<TensorParallelRunner>(std::move(runner), comm_.get(),
                                                   timed_comm_.get(), keepalive);
  return std::make_unique<SharedRunner>(runner_);
}

void TpGroup::SetStepSink(TpStepSink sink) {
  if (runner_ != nullptr) runner_->SetStepSink(std::move(sink));
}

absl::Status TpGroup::Health() {
  if (followers_ != nullptr) {
    if (std::optional<std::string> exited = followers_->PollExited(); exited.has_value()) {
      // The engine thread may be waiting on the dead rank inside a step (a graph replay waits
      // without a deadline of its own): end that wait before the caller drains.
      if (runner_ != nullptr) runner_->AbortCollectives();
      return absl::FailedPreconditionError(*exited);
    }
  }
  if (runner_ != nullptr && runner_->failed()) return runner_->failure();
  return absl::OkStatus();
}

bool TpGroup::Stop() {
  if (runner_ != nullptr) {
    runner_->SetStepSink(nullptr);
    runner_->Stop();
  }
  if (followers_ == nullptr) return true;
  const bool clean = followers_->WaitAll(absl::Seconds(10));
  if (!clean) Kill();
  return clean && (runner_ == nullptr || !runner_->failed());
}

void TpGroup::Kill() {
  if (runner_ != nullptr) {
    runner_->SetStepSink(nullptr);
    runner_->Stop(/*notify_followers=*/false);
  }
  if (followers_ != nullptr) followers_->Terminate(absl::Seconds(5));
}

absl::Status RunTensorParallelFollowerProcess(const TpGroupOptions& options,
                                              const RunnerFactoryOptions& runner) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      CreateGlooCommunicator(CommOptionsOf(options, options.leader_address));
  if (!comm.ok()) return comm.status();
  std::unique_ptr<Communicator> nccl;  // outlive the runner
  std::unique_ptr<TimedCommunicator> timed;
  KVSERVE_ASSIGN_OR_RETURN(CreatedRunner created,
                           CreateLlamaRunner(ShardOptions(options, options.leader_address, nullptr,
                                                          runner, comm->get(), &nccl, &timed)));
  std::cout << "kvserve-worker tp_rank=" << options.rank << " of " << options.size
            << " device=" << created.backend_name << " weights=" << created.weight_types << " ("
            << created.weight_bytes << " bytes) ready" << std::endl;
  return RunTensorParallelFollower(*created.runner, **comm);
}

}  // namespace kvserve
