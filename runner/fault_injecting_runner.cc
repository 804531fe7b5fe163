#include "runner/fault_injecting_runner.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvserve {

FaultInjectingRunner::FaultInjectingRunner(std::unique_ptr<ModelRunner> runner,
                                           int64_t fail_at_step)
    : runner_(std::move(runner)), fail_at_step_(fail_at_step) {}

absl::StatusOr<StepResult> FaultInjectingRunner::Execute(const StepPlan& plan) {
  if (++steps_ >= fail_at_step_) {
    return absl::InternalError(
        absl::StrCat("fault injection: the runner fails at step ", fail_at_step_));
  }
  return runner_->Execute(plan);
}

}  // namespace kvserve
