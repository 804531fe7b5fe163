// AdmissionQueue: where requests wait when no worker can take them now.
//
// Submit() routes a request at once when it can (through ClusterBooks::Route, which also
// reserves its blocks); otherwise the request waits in a bounded queue ordered by priority
// (higher first), then deadline (earlier first; no deadline last), then arrival (earlier first).
// The queue is strict: waiters are admitted in that order, and a waiter that does not fit yet
// holds back the ones behind it (a large request is never starved by a stream of small ones). A
// new request bypasses the queue only when it would sort before every waiter (a higher priority,
// or the same priority and an earlier deadline).
//
// Outcomes, delivered exactly once to the request's callback, each with a typed reason:
//   OK + RoutingDecision   kNone: routed; the decision names the worker; its blocks are reserved
//   RESOURCE_EXHAUSTED     kQueueFull: max_waiting_requests are waiting already;
//                          kNeverFits: the request needs more blocks than any worker's whole pool
//                          (refused at once, never queued)
//   UNAVAILABLE            kNoWorker: no worker is routable (all draining, unreachable or none
//                          registered); kShuttingDown: the queue was destroyed
//   CANCELLED              kCancelled: Cancel() removed it
//   DEADLINE_EXCEEDED      kDeadline: its deadline passed before it was admitted
//
// Nothing polls. Waiters are retried when ClusterBooks reports that capacity changed (a status
// update, a request finishing: the queue registers itself as the books' capacity listener) and
// on Retry(). Deadlines are checked on every submission and retry, and by ExpireOverdue(); a
// waiter whose caller goes away (a gRPC call cancelled or past its deadline) is removed with
// Cancel(). A separate deadline index keeps each expiry check proportional to the waiters that
// expire, not to the queue's length.
//
// Callbacks may run inline inside Submit, or on whichever thread triggers the retry (a status
// stream thread, a request finishing); they run without any queue or books lock held, so they
// may call back into the queue or the books, but they should be quick (never block).
//
// Thread-safety: thread-safe. `mu_` guards the waiters; it is taken before ClusterBooks::mu_.
// The queue must outlive every call into it and be destroyed only after the books stop calling
// its listener (the destructor unregisters it).

#ifndef KVSERVE_ROUTER_ADMISSION_QUEUE_H_
#define KVSERVE_ROUTER_ADMISSION_QUEUE_H_

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/cluster_books.h"
#include "router/router_options.h"

namespace kvserve {

struct AdmissionRequest {
  RouteRequest route;
  int priority = 0;                              // higher first
  absl::Time deadline = absl::InfiniteFuture();  // give up waiting after this
};

// Why a request was not admitted (kNone: it was).
enum class AdmissionRefusal {
  kNone,
  kQueueFull,
  kNeverFits,
  kNoWorker,
  kCancelled,
  kDeadline,
  kShuttingDown,
};

// The metrics label of a refusal: "queue_full", "never_fits", "no_worker", "cancelled",
// "deadline", "shutting_down" ("" for kNone).
absl::string_view RefusalLabel(AdmissionRefusal refusal);

struct AdmissionOutcome {
  absl::StatusOr<RoutingDecision> decision;  // OK iff refusal == kNone
  AdmissionRefusal refusal = AdmissionRefusal::kNone;
};

using AdmissionCallback = absl::AnyInvocable<void(AdmissionOutcome)>;

class AdmissionQueue {
 public:
  // Registers itself as `books`' capacity listener. `books` must outlive the queue.
  // REQUIRES: options.Validate() is OK.
  AdmissionQueue(ClusterBooks* books, const AdmissionOptions& options);
  // Refuses every waiter (kShuttingDown).
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // Routes or enqueues `request`; `done` gets the outcome exactly once (see above). Returns the
  // ticket naming the waiter for Cancel(), or 0 when `done` already ran (inline). Tickets are
  // never reused.
  uint64_t Submit(AdmissionRequest request, AdmissionCallback done);

  // Removes a waiter; its callback gets CANCELLED (inline, before Cancel returns). False when
  // the ticket is not waiting (it was already admitted, refused or cancelled: its callback ran
  // or is running on another thread).
  bool Cancel(uint64_t ticket);

  // Admits the waiters that fit now, in order, and refuses those past their deadline.
  void Retry();
  // Refuses the waiters whose deadline is <= now. Returns how many.
  int ExpireOverdue(absl::Time now = absl::Now());

  int num_waiting() const;

 private:
  // Admission order: (-priority, deadline, arrival); arrival doubles as the ticket.
  using Key = std::tuple<int, absl::Time, uint64_t>;
  struct Waiter {
    PreparedRoute prepared;
    AdmissionCallback done;
  };
  struct Completion {
    AdmissionCallback done;
    AdmissionOutcome outcome;
  };

  // Removes the waiter `key` and queues its completion with `status` and `refusal`.
  void RemoveLocked(Key key, absl::Status status, AdmissionRefusal refusal,
                    std::vector<Completion>* completions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdmitWaiters(std::vector<Completion>* completions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(absl::Time now, std::vector<Completion>* completions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(std::vector<Completion>& completions);

  ClusterBooks* const books_;  // not owned
  const AdmissionOptions options_;

  mutable absl::Mutex mu_;
  std::map<Key, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Key> key_of_ ABSL_GUARDED_BY(mu_);  // ticket -> its key
  // (deadline, ticket) of every waiter with a deadline, earliest first.
  std::set<std::pair<absl::Time, uint64_t>> by_deadline_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ADMISSION_QUEUE_H_
