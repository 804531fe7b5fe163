// The collective checks every communicator test runs, in threads or in separate processes
// (comm_rank_helper): each rank fills its buffers from its rank alone, so every rank knows the
// expected results without talking to the others.
//   - AllReduceSum f32 of integers (exact), of several sizes, including 0 values;
//   - AllReduceSum bf16 against the sum in double, within one bf16 rounding;
//   - AllGather: rank r's bytes land at r * bytes, in rank order;
//   - Broadcast from the last rank (a non-zero root in groups of two or more);
//   - Barrier.
#ifndef KVSERVE_TESTS_COMM_COLLECTIVE_CHECKS_H_
#define KVSERVE_TESTS_COMM_COLLECTIVE_CHECKS_H_

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace kvserve::testing {

// OK, or the first collective error or wrong value (naming the rank, the call and the index).
absl::Status RunCollectiveChecks(Communicator& communicator);

}  // namespace kvserve::testing

#endif  // KVSERVE_TESTS_COMM_COLLECTIVE_CHECKS_H_
