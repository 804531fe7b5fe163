// TimedCommunicator: a Communicator that forwards every call to another and adds up the wall
// time its AllReduceSum calls take, so that a tensor-parallel leader can report the all-reduce
// share of each step (kvserve_tp_allreduce_seconds) without timing code in the model.
//
// Thread-safety: one call at a time, as every Communicator (the sum is read by the same thread
// that makes the calls, between steps).
#ifndef KVSERVE_COMM_TIMED_COMMUNICATOR_H_
#define KVSERVE_COMM_TIMED_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/communicator.h"

namespace kvserve {

class TimedCommunicator final : public Communicator {
 public:
  // inner: borrowed; it must outlive this.
  explicit TimedCommunicator(Communicator* inner) : inner_(inner) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* name() const override { return inner_->name(); }

  absl::Status AllReduceSum(void* data, int64_t count, kernels::DType dtype) override {
    const absl::Time start = absl::Now();
    absl::Status status = inner_->AllReduceSum(data, count, dtype);
    all_reduce_time_ += absl::Now() - start;
    return status;
  }
  absl::Status AllGather(const void* in, void* out, size_t bytes) override {
    return inner_->AllGather(in, out, bytes);
  }
  absl::Status Broadcast(void* data, size_t bytes, int root) override {
    return inner_->Broadcast(data, bytes, root);
  }
  absl::Status Barrier() override { return inner_->Barrier(); }
  void Abort() override { inner_->Abort(); }

  // The AllReduceSum time since the previous call, and starts a new sum.
  absl::Duration TakeAllReduceTime() {
    const absl::Duration total = all_reduce_time_;
    all_reduce_time_ = absl::ZeroDuration();
    return total;
  }

 private:
  Communicator* const inner_;
  absl::Duration all_reduce_time_;
};

}  // namespace kvserve

#endif  // KVSERVE_COMM_TIMED_COMMUNICATOR_H_
