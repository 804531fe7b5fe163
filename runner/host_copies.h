// HostCopies: how a model runner runs a plan's host-tier copies so that loads overlap the step
// instead of delaying it. Stores (device -> host) run at once, in stream order: the block they
// read is usually written by this very step's forward. Loads (host -> device) are issued beside
// the stream (HostKvPool::Load, Backend::CopyFromHostBeside) and joined when the step's forward
// has been issued, so they run while it computes. The result is always that of running
// everything in plan order: a copy that touches a device block or a host entry a load in flight
// touches, a block copy that reads or writes a loading block, and a forward over a block table
// that holds one join first. The scheduler defers a sequence whose blocks are loading by a step
// (SchedulerConfig::defer_host_loads), so its forward finds them loaded and nobody waits.
//
// Thread-safety: one thread (the engine thread).
#ifndef KVSERVE_RUNNER_HOST_COPIES_H_
#define KVSERVE_RUNNER_HOST_COPIES_H_

#include <functional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "engine/step_plan.h"
#include "runner/runner_sequences.h"

namespace kvserve {

class HostCopies {
 public:
  struct Ops {
    std::function<void(BlockId device, HostBlockId host)> store;  // in stream order
    std::function<void(HostBlockId host, BlockId device)> load;   // beside the stream
    std::function<void()> join;  // every later call runs after every load so far
  };
  explicit HostCopies(Ops ops) : ops_(std::move(ops)) {}

  // Runs plan.host_copies in order, then makes plan.block_copies safe to run.
  void Issue(const StepPlan& plan);
  // Before the forward over `work`: joins when a block table holds a loading block.
  void BeforeForward(const std::vector<RunnerWork>& work);
  // After the forward was issued (or when there is none): joins what is still loading. Returns
  // whether the step had to join earlier (Issue .. BeforeForward): its forward or its copies
  // waited for a load (StepResult::waited_for_host_loads).
  bool Finish();

 private:
  void Join();
  void JoinEarly();  // a join Issue or BeforeForward needs

  Ops ops_;
  absl::flat_hash_set<BlockId> loading_blocks_;     // destinations of the loads in flight
  absl::flat_hash_set<HostBlockId> loading_hosts_;  // their sources
  bool waited_ = false;
};

}  // namespace kvserve

#endif  // KVSERVE_RUNNER_HOST_COPIES_H_
