// AdmissionQueue: order (priority, then deadline, then arrival, strict), the bound, refusals and
// their typed reasons, cancellation, deadlines, and wake-up when capacity arrives (a status report
// or a request finishing), with real threads waiting for their callbacks.

#include "router/admission_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "tests/router/router_test_util.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using testing_util::CapacitySpec;
using testing_util::MakeStatus;
using testing_util::Range;
using testing_util::SetSnapshotPart;

constexpr uint64_t kEpoch = 5;

class AdmissionQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    books_ = std::move(*ClusterBooks::Create(RouterCoreOptions{}));
    KVSERVE_ASSERT_OK(books_->AddWorker("w"));
    Report({.total = 100, .free = 0});
  }

  // The queue refuses its remaining waiters when destroyed; their callbacks still record.
  void TearDown() override { queue_.reset(); }

  void MakeQueue(int max_waiting = 64) {
    queue_ = std::make_unique<AdmissionQueue>(
        books_.get(), AdmissionOptions{.max_waiting_requests = max_waiting});
  }

  void Report(const CapacitySpec& capacity, bool draining = false) {
    kvserve::v1::WorkerStatus status = MakeStatus(kEpoch, capacity);
    if (first_report_) SetSnapshotPart(&status, 0, 0, true, {});
    first_report_ = false;
    status.set_draining(draining);
    KVSERVE_ASSERT_OK(books_->ApplyStatus("w", status));
  }

  // A request needing exactly `blocks` blocks of 16 tokens (one prompt block, the rest output).
  static AdmissionRequest Needing(const std::string& id, int blocks, int priority = 0) {
    static std::atomic<int> salt = 0;
    return AdmissionRequest{.route = RouteRequest{.request_id = id,
                                                  .tokens = Range(16, 100000 * ++salt),
                                                  .max_tokens = 16 * (blocks - 1)},
                            .priority = priority};
  }

  // Submits with a callback that records the outcome under `mu_`.
  uint64_t SubmitRecorded(AdmissionRequest request) {
    const std::string id = request.route.request_id;
    return queue_->Submit(std::move(request), [this, id](AdmissionOutcome outcome) {
      absl::MutexLock lock(&mu_);
      order_.push_back(id);
      codes_[id] = outcome.decision.status().code();
      refusals_[id] = outcome.refusal;
    });
  }

  // Submits and waits for the callback on this thread (as a test's stand-in for a caller that
  // waits for its outcome).
  absl::StatusOr<RoutingDecision> SubmitAndWait(AdmissionRequest request) {
    absl::Notification done;
    absl::StatusOr<RoutingDecision> result;
    queue_->Submit(std::move(request), [&](AdmissionOutcome outcome) {
      result = std::move(outcome.decision);
      done.Notify();
    });
    done.WaitForNotification();
    return result;
  }

  std::vector<std::string> Order() {
    absl::MutexLock lock(&mu_);
    return order_;
  }
  absl::StatusCode Code(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return codes_.at(id);
  }
  AdmissionRefusal Refusal(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return refusals_.at(id);
  }

  std::unique_ptr<ClusterBooks> books_;
  std::unique_ptr<AdmissionQueue> queue_;
  bool first_report_ = true;
  absl::Mutex mu_;
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::StatusCode> codes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, AdmissionRefusal> refusals_ ABSL_GUARDED_BY(mu_);
};

TEST_F(AdmissionQueueTest, RoutesAtOnceWhenAWorkerHasRoom) {
  MakeQueue();
  Report({.total = 100, .free = 50});
  EXPECT_EQ(SubmitRecorded(Needing("r", 4)), 0u) << "completed inline";
  EXPECT_EQ(Order(), std::vector<std::string>{"r"});
  EXPECT_EQ(Code("r"), absl::StatusCode::kOk);
  EXPECT_EQ(queue_->num_waiting(), 0);
}

TEST_F(AdmissionQueueTest, WaitersAreAdmittedByPriorityThenArrival) {
  MakeQueue();
  for (auto [id, priority] : std::vector<std::pair<std::string, int>>{
           {"low1", 0}, {"high1", 5}, {"low2", 0}, {"high2", 5}, {"neg", -3}}) {
    EXPECT_NE(SubmitRecorded(Needing(id, 4, priority)), 0u);
  }
  EXPECT_EQ(queue_->num_waiting(), 5);
  Report({.total = 100, .free = 8});  // room for two
  EXPECT_EQ(Order(), (std::vector<std::string>{"high1", "high2"}));
  Report({.total = 100, .free = 100});  // 8 still reserved: room for the rest
  EXPECT_EQ(Order(), (std::vector<std::string>{"high1", "high2", "low1", "low2", "neg"}));
  EXPECT_EQ(queue_->num_waiting(), 0);
}

TEST_F(AdmissionQueueTest, EqualPriorityWaitersAreAdmittedEarliestDeadlineFirst) {
  MakeQueue();
  const absl::Time now = absl::Now();
  for (auto [id, deadline] :
       std::vector<std::pair<std::string, absl::Time>>{{"none", absl::InfiniteFuture()},
                                                       {"late", now + absl::Hours(2)},
                                                       {"soon", now + absl::Hours(1)},
                                                       {"late2", now + absl::Hours(2)}}) {
    AdmissionRequest request = Needing(id, 4);
    request.deadline = deadline;
    EXPECT_NE(SubmitRecorded(std::move(request)), 0u) << id;
  }
  Report({.total = 100, .free = 100});
  EXPECT_EQ(Order(), (std::vector<std::string>{"soon", "late", "late2", "none"}));
}

TEST_F(AdmissionQueueTest, AnEarlierDeadlineBypassesEqualPriorityWaiters) {
  MakeQueue();
  Report({.total = 100, .free = 5});
  SubmitRecorded(Needing("big", 10));  // no deadline: waits
  AdmissionRequest urgent = Needing("urgent", 2);
  urgent.deadline = absl::Now() + absl::Hours(1);
  EXPECT_EQ(SubmitRecorded(std::move(urgent)), 0u) << "sorts before every waiter and fits";
  EXPECT_EQ(Code("urgent"), absl::StatusCode::kOk);
}

TEST_F(AdmissionQueueTest, TheHeadHoldsBackSmallerWaitersUntilItLeaves) {
  MakeQueue();
  const uint64_t big = SubmitRecorded(Needing("big", 10));
  SubmitRecorded(Needing("small", 2));
  Report({.total = 100, .free = 5});
  EXPECT_TRUE(Order().empty()) << "strict order: small waits behind big";
  EXPECT_TRUE(queue_->Cancel(big));
  EXPECT_FALSE(queue_->Cancel(big));
  EXPECT_EQ(Order(), (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(Code("big"), absl::StatusCode::kCancelled);
  EXPECT_EQ(Code("small"), absl::StatusCode::kOk);
}

TEST_F(AdmissionQueueTest, HigherPriorityBypassesTheQueueEqualPriorityDoesNot) {
  MakeQueue();
  Report({.total = 100, .free = 5});
  SubmitRecorded(Needing("big", 10, 1));
  EXPECT_NE(SubmitRecorded(Needing("same", 2, 1)), 0u);
  EXPECT_EQ(SubmitRecorded(Needing("urgent", 2, 2)), 0u);
  EXPECT_EQ(Order(), std::vector<std::string>{"urgent"});
  EXPECT_EQ(queue_->num_waiting(), 2);
}

TEST_F(AdmissionQueueTest, PastTheBoundRequestsAreRefused) {
  MakeQueue(/*max_waiting=*/2);
  SubmitRecorded(Needing("a", 4));
  SubmitRecorded(Needing("b", 4));
  EXPECT_EQ(SubmitRecorded(Needing("c", 4)), 0u);
  EXPECT_EQ(Code("c"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Refusal("c"), AdmissionRefusal::kQueueFull);
  EXPECT_EQ(RefusalLabel(Refusal("c")), "queue_full");
  EXPECT_EQ(queue_->num_waiting(), 2);
}

TEST_F(AdmissionQueueTest, ARequestLargerThanEveryPoolIsRefusedAtOnce) {
  MakeQueue();
  EXPECT_EQ(SubmitRecorded(Needing("huge", 101)), 0u);
  EXPECT_EQ(Code("huge"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Refusal("huge"), AdmissionRefusal::kNeverFits);
  SubmitRecorded(Needing("waiting", 4));
  EXPECT_EQ(SubmitRecorded(Needing("huge2", 200)), 0u) << "also when others wait";
  EXPECT_EQ(Code("huge2"), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(queue_->num_waiting(), 1);
}

TEST_F(AdmissionQueueTest, NoRoutableWorkerIsUnavailable) {
  MakeQueue();
  const uint64_t ticket = SubmitRecorded(Needing("waiting", 4));
  ASSERT_NE(ticket, 0u);
  Report({.total = 100, .free = 0}, /*draining=*/true);
  EXPECT_EQ(Code("waiting"), absl::StatusCode::kUnavailable) << "the last worker drains";
  EXPECT_EQ(SubmitRecorded(Needing("late", 4)), 0u);
  EXPECT_EQ(Code("late"), absl::StatusCode::kUnavailable);
}

TEST_F(AdmissionQueueTest, DeadlinesExpireWaiters) {
  MakeQueue();
  AdmissionRequest request = Needing("timed", 4);
  request.deadline = absl::Now() + absl::Milliseconds(1);
  ASSERT_NE(SubmitRecorded(std::move(request)), 0u);
  EXPECT_EQ(queue_->ExpireOverdue(absl::Now() + absl::Seconds(1)), 1);
  EXPECT_EQ(Code("timed"), absl::StatusCode::kDeadlineExceeded);

  AdmissionRequest past = Needing("past", 1);
  past.deadline = absl::Now() - absl::Seconds(1);
  EXPECT_EQ(SubmitRecorded(std::move(past)), 0u);
  EXPECT_EQ(Code("past"), absl::StatusCode::kDeadlineExceeded);

  AdmissionRequest soon = Needing("soon", 4);
  soon.deadline = absl::Now() + absl::Milliseconds(30);
  ASSERT_NE(SubmitRecorded(std::move(soon)), 0u);
  absl::SleepFor(absl::Milliseconds(40));
  queue_->Retry();  // any retry (a status report, a request ending) expires overdue waiters
  EXPECT_EQ(Code("soon"), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Refusal("soon"), AdmissionRefusal::kDeadline);
  EXPECT_EQ(queue_->num_waiting(), 0);
}

TEST_F(AdmissionQueueTest, CancelRefusesTheWaiterBeforeItReturns) {
  MakeQueue();
  const uint64_t ticket = SubmitRecorded(Needing("r", 4));
  ASSERT_NE(ticket, 0u);
  EXPECT_TRUE(queue_->Cancel(ticket));
  EXPECT_EQ(Code("r"), absl::StatusCode::kCancelled);
  EXPECT_EQ(Refusal("r"), AdmissionRefusal::kCancelled);
  EXPECT_EQ(queue_->num_waiting(), 0);
  EXPECT_FALSE(queue_->Cancel(ticket)) << "tickets are never reused";
}

TEST_F(AdmissionQueueTest, BlockedHandlersWakeWhenAStatusReportBringsRoom) {
  MakeQueue();
  constexpr int kHandlers = 6;
  std::vector<absl::StatusOr<RoutingDecision>> outcomes(kHandlers);
  std::vector<std::thread> handlers;
  for (int i = 0; i < kHandlers; ++i) {
    handlers.emplace_back(
        [&, i] { outcomes[i] = SubmitAndWait(Needing("h" + std::to_string(i), 4)); });
  }
  while (queue_->num_waiting() < kHandlers) absl::SleepFor(absl::Milliseconds(1));
  std::thread status_stream([&] { Report({.total = 100, .free = 4 * kHandlers}); });
  status_stream.join();
  for (std::thread& handler : handlers) handler.join();
  for (const auto& outcome : outcomes) {
    KVSERVE_ASSERT_OK(outcome);
    EXPECT_EQ(outcome->worker_id, "w");
    EXPECT_EQ(outcome->charged_blocks, 4);
  }
}

TEST_F(AdmissionQueueTest, FinishingRequestsLetWaitersIn) {
  MakeQueue(/*max_waiting=*/1000);
  Report({.total = 100, .free = 12});  // three 4-block requests at a time
  constexpr int kHandlers = 8;
  constexpr int kRequestsEach = 25;
  std::atomic<int> admitted = 0;
  std::atomic<int> in_flight = 0;
  std::atomic<int> max_in_flight = 0;
  std::vector<std::thread> handlers;
  for (int t = 0; t < kHandlers; ++t) {
    handlers.emplace_back([&, t] {
      for (int i = 0; i < kRequestsEach; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        absl::StatusOr<RoutingDecision> outcome = SubmitAndWait(Needing(id, 4, i % 3));
        KVSERVE_ASSERT_OK(outcome);
        const int now = ++in_flight;
        int seen = max_in_flight.load();
        while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
        }
        absl::SleepFor(absl::Microseconds(200));  // "generating"
        --in_flight;
        ++admitted;
        books_->Release(id);  // the request ends: wakes the queue
      }
    });
  }
  for (std::thread& handler : handlers) handler.join();
  EXPECT_EQ(admitted, kHandlers * kRequestsEach);
  EXPECT_LE(max_in_flight, 3) << "reservations must never overbook the 12 free blocks";
  EXPECT_EQ(queue_->num_waiting(), 0);
}

TEST_F(AdmissionQueueTest, DestroyingTheQueueRefusesItsWaiters) {
  MakeQueue();
  SubmitRecorded(Needing("left", 4));
  queue_.reset();
  EXPECT_EQ(Code("left"), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Refusal("left"), AdmissionRefusal::kShuttingDown);
  Report({.total = 100, .free = 100});  // the books no longer call the queue
}

}  // namespace
}  // namespace kvserve
