#include "runner/host_copies.h"

namespace kvserve {

void HostCopies::Issue(const StepPlan& plan) {
  waited_ = false;
  for (const HostCopy& copy : plan.host_copies) {
    if (loading_blocks_.contains(copy.device) || loading_hosts_.contains(copy.host)) JoinEarly();
    if (copy.to_host) {
      ops_.store(copy.device, copy.host);
    } else {
      ops_.load(copy.host, copy.device);
      loading_blocks_.insert(copy.device);
      loading_hosts_.insert(copy.host);
    }
  }
  for (const BlockCopy& copy : plan.block_copies) {
    if (loading_blocks_.contains(copy.src) || loading_blocks_.contains(copy.dst)) {
      JoinEarly();
      break;
    }
  }
}

void HostCopies::BeforeForward(const std::vector<RunnerWork>& work) {
  if (loading_blocks_.empty()) return;
  for (const RunnerWork& item : work) {
    for (BlockId block : item.sequence->block_table) {
      if (loading_blocks_.contains(block)) {
        JoinEarly();
        return;
      }
    }
  }
}

bool HostCopies::Finish() {
  Join();
  return waited_;
}

void HostCopies::Join() {
  if (loading_blocks_.empty()) return;
  ops_.join();
  loading_blocks_.clear();
  loading_hosts_.clear();
}

void HostCopies::JoinEarly() {
  Join();
  waited_ = true;
}

}  // namespace kvserve
