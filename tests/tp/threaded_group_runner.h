// ThreadedGroupRunner (test-only): a whole tensor-parallel group of LlamaModelRunners in one
// process behind the ModelRunner interface, so that the real EngineCore drives it. Rank 0 is
// the leader: the engine's plans (with the leader's block tables) go to every rank unchanged,
// each rank runs them on its own thread (their collectives need every rank at once), and the
// leader's results come back. What a real group does over a control channel, minus the wire.
//
// RunPhases drives an EngineCore over any runner through phases of requests.
//
// Thread-safety: one caller (the engine thread), as every ModelRunner.
#ifndef KVSERVE_TESTS_TP_THREADED_GROUP_RUNNER_H_
#define KVSERVE_TESTS_TP_THREADED_GROUP_RUNNER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "comm/communicator.h"
#include "engine/model_runner.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/device_weights.h"
#include "model/weights_loader.h"
#include "runner/llama_model_runner.h"
#include "tests/comm/comm_test_util.h"
#include "tests/engine/engine_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve::testing {

class ThreadedGroupRunner final : public ModelRunner {
 public:
  // A group of `size` ranks on `spec` (LoadWeights), each with its own CPU backend of
  // `threads_per_rank` threads and a Gloo communicator; decode graphs off (the CPU has none).
  static absl::StatusOr<std::unique_ptr<ThreadedGroupRunner>> Create(const std::string& spec,
                                                                     int32_t size,
                                                                     int32_t threads_per_rank = 1,
                                                                     bool keep_stored = false) {
    std::unique_ptr<ThreadedGroupRunner> group(new ThreadedGroupRunner);
    group->comms_ = MakeGlooGroup(size);
    if (group->comms_.size() != static_cast<size_t>(size)) {
      return absl::UnavailableError("the Gloo group did not form");
    }
    group->runners_.resize(size);
    std::vector<absl::Status> status(size);
    RunRanks(size, [&](int rank) {
      absl::StatusOr<ModelWeights> host = LoadWeights(
          spec,
          {.keep_stored_types = keep_stored, .tensor_parallel = {.rank = rank, .size = size}});
      if (!host.ok()) {
        status[rank] = host.status();
        return;
      }
      auto weights =
          DeviceWeights::Upload(*host, std::make_shared<kernels::cpu::CpuBackend>(threads_per_rank),
                                kernels::DType::kF32);
      if (!weights.ok()) {
        status[rank] = weights.status();
        return;
      }
      auto runner = LlamaModelRunner::Create(
          *std::move(weights), {.enforce_eager = true, .comm = group->comms_[rank].get()});
      if (!runner.ok()) {
        status[rank] = runner.status();
        return;
      }
      group->runners_[rank] = *std::move(runner);
    });
    for (const absl::Status& s : status) {
      if (!s.ok()) return s;
    }
    return group;
  }

  int32_t size() const { return static_cast<int32_t>(runners_.size()); }
  LlamaModelRunner& rank(int32_t r) { return *runners_[r]; }

  int32_t vocab_size() const override { return runners_[0]->vocab_size(); }
  int32_t max_context_len() const override { return runners_[0]->max_context_len(); }
  std::vector<int32_t> eos_token_ids() const override { return runners_[0]->eos_token_ids(); }
  int64_t KvBytesPerBlock(int32_t block_size) const override {
    return runners_[0]->KvBytesPerBlock(block_size);
  }
  absl::Status Initialize(const RunnerConfig& config) override {
    return OnEveryRank([&](LlamaModelRunner& runner) { return runner.Initialize(config); });
  }
  absl::StatusOr<StepResult> Execute(const StepPlan& plan) override {
    StepResult leader;
    absl::Status status = OnEveryRank([&](LlamaModelRunner& runner) {
      KVSERVE_ASSIGN_OR_RETURN(StepResult result, runner.Execute(plan));
      if (&runner == runners_[0].get()) leader = std::move(result);
      return absl::OkStatus();
    });
    if (!status.ok()) return status;
    ++num_steps_;
    return leader;
  }
  int64_t num_steps() const { return num_steps_; }

 private:
  ThreadedGroupRunner() = default;

  // Runs fn on every rank at once; the first error (by rank) names its rank.
  absl::Status OnEveryRank(const std::function<absl::Status(LlamaModelRunner&)>& fn) {
    std::vector<absl::Status> status(runners_.size());
    RunRanks(size(), [&](int rank) { status[rank] = fn(*runners_[rank]); });
    for (size_t rank = 0; rank < status.size(); ++rank) {
      if (!status[rank].ok()) {
        return absl::Status(status[rank].code(),
                            absl::StrCat("rank ", rank, ": ", status[rank].message()));
      }
    }
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<Communicator>> comms_;  // outlive the runners
  std::vector<std::unique_ptr<LlamaModelRunner>> runners_;
  int64_t num_steps_ = 0;
};

// What RunPhases gives back.
struct PhasedRun {
  std::map<std::string, RequestResult> results;
  EngineStats stats;
  // Steps whose batch mixed a prompt chunk that is not the prompt's last (a chunked prefill)
  // with decodes.
  int32_t num_mixed_steps = 0;
};

// Runs `phases` of requests on a new EngineCore over `runner`: each phase's requests are
// submitted together and run until the engine is idle (so a later phase can hit the prefix
// cache an earlier one filled). Fails the test on an engine error.
inline PhasedRun RunPhases(std::unique_ptr<ModelRunner> runner, const EngineOptions& options,
                           const std::vector<std::vector<EngineRequest>>& phases,
                           const Tokenizer* tokenizer = nullptr) {
  PhasedRun run;
  auto core = EngineCore::Create(options, std::move(runner), tokenizer, nullptr);
  KVSERVE_EXPECT_OK(core);
  if (!core.ok()) return run;
  for (const std::vector<EngineRequest>& phase : phases) {
    std::map<std::string, std::shared_ptr<RequestStream>> streams;
    for (const EngineRequest& request : phase) {
      streams[request.request_id] = SubmitToCore(**core, request);
    }
    RunCore(**core, [&](const StepPlan& plan) {
      bool chunk = false, decode = false;
      for (const ScheduledSequence& seq : plan.sequences) {
        chunk |= seq.num_scheduled_tokens > 1 && !seq.sample;
        decode |= seq.num_scheduled_tokens == 1 && !seq.is_new;
      }
      run.num_mixed_steps += chunk && decode ? 1 : 0;
    });
    for (auto& [id, stream] : streams) {
      if (stream != nullptr) run.results[id].Drain(*stream);
    }
  }
  run.stats = (*core)->Stats();
  return run;
}

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_TP_THREADED_GROUP_RUNNER_H_
