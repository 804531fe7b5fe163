// AdmissionQueue: where requests wait when no worker can take them now.
//
// Submit() routes a request at once when it can (through ClusterBooks::Route, which also
// reserves its blocks); otherwise the request waits in a bounded queue ordered by priority
// (higher first), then arrival (earlier first). The queue is strict: waiters are admitted in that
// order, and a waiter that does not fit yet holds back the ones behind it (a large request is
// never starved by a stream of small ones). A new request bypasses the queue only when its
// priority is higher than every waiter's.
//
// Outcomes, delivered exactly once to the request's callback:
//   OK + RoutingDecision   routed: the decision names the worker; its blocks are reserved
//   RESOURCE_EXHAUSTED     the queue is full (max_waiting_requests), or the request needs more
//                          blocks than any worker's whole pool (refused at once, never queued)
//   UNAVAILABLE            no worker is routable (all draining, unreachable or none registered)
//   CANCELLED              Cancel() removed it
//   DEADLINE_EXCEEDED      its deadline passed while it waited
// Waiters are retried whenever ClusterBooks reports that capacity changed (a status update, a
// request finishing: the queue registers itself as the books' capacity listener) and on Retry().
// Deadlines are checked on every retry and by ExpireOverdue(), which a service may call from a
// timer; the blocking Admit() enforces its own deadline exactly.
//
// Two ways to use it:
//   - callbacks: Submit(request, callback) -> ticket; Cancel(ticket) on client cancellation. The
//     callback may run inline inside Submit, or on whichever thread triggers the retry (a status
//     stream thread, a request finishing); it runs without any queue or books lock held, so it
//     may call back into the queue or the books, but it should be quick.
//   - blocking: Admit(request, is_cancelled) waits on the calling thread (a sync gRPC handler),
//     polling is_cancelled every cancel_poll_interval.
//
// Thread-safety: thread-safe. `mu_` guards the waiters; it is taken before ClusterBooks::mu_.
// The queue must outlive every call into it and be destroyed only after the books stop calling
// its listener (the destructor unregisters it).

#ifndef KVSERVE_ROUTER_ADMISSION_QUEUE_H_
#define KVSERVE_ROUTER_ADMISSION_QUEUE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
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

using AdmissionCallback = absl::AnyInvocable<void(absl::StatusOr<RoutingDecision>)>;

class AdmissionQueue {
 public:
  // Registers itself as `books`' capacity listener. `books` must outlive the queue.
  // REQUIRES: options.Validate() is OK.
  AdmissionQueue(ClusterBooks* books, const AdmissionOptions& options);
  ~AdmissionQueue();
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // Routes or enqueues `request`; `done` gets the outcome exactly once (see above). Returns the
  // ticket naming the waiter for Cancel(), or 0 when `done` already ran (inline).
  uint64_t Submit(AdmissionRequest request, AdmissionCallback done);

  // Removes a waiter; its callback gets CANCELLED. False when the ticket is not waiting (it was
  // already admitted, refused or cancelled: its callback ran or is running).
  bool Cancel(uint64_t ticket);

  // Blocks until the request is routed or refused, `is_cancelled()` returns true (CANCELLED) or
  // the deadline passes (DEADLINE_EXCEEDED).
  absl::StatusOr<RoutingDecision> Admit(AdmissionRequest request,
                                        const std::function<bool()>& is_cancelled = nullptr);

  // Admits the waiters that fit now, in order, and refuses those past their deadline.
  void Retry();
  // Refuses the waiters whose deadline is <= now. Returns how many.
  int ExpireOverdue(absl::Time now = absl::Now());

  int num_waiting() const;

 private:
  // Waiters are ordered by (-priority, arrival); arrival doubles as the ticket.
  using Key = std::pair<int, uint64_t>;
  struct Waiter {
    PreparedRoute prepared;
    absl::Time deadline;
    AdmissionCallback done;
  };
  struct Completion {
    AdmissionCallback done;
    absl::StatusOr<RoutingDecision> outcome;
  };

  // Removes the waiter `ticket` and queues its completion with `status`. False when not waiting.
  bool Remove(uint64_t ticket, absl::Status status, std::vector<Completion>* completions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AdmitWaiters(std::vector<Completion>* completions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(absl::Time now, std::vector<Completion>* completions)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(std::vector<Completion>& completions);

  ClusterBooks* const books_;  // not owned
  const AdmissionOptions options_;

  mutable absl::Mutex mu_;
  std::map<Key, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, int> priority_of_ ABSL_GUARDED_BY(mu_);  // ticket -> priority
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_ADMISSION_QUEUE_H_
