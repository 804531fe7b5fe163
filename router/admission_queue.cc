#include "router/admission_queue.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace kvserve {
namespace {

// The final outcome of a decision that is not "wait".
absl::StatusOr<RoutingDecision> Outcome(RoutingDecision decision) {
  switch (decision.verdict) {
    case RouteVerdict::kRouted:
      return decision;
    case RouteVerdict::kNeverFits:
      return absl::ResourceExhaustedError(
          absl::StrCat("request needs ", decision.needed_blocks,
                       " KV blocks (prompt + max_tokens), more than any worker's whole pool"));
    case RouteVerdict::kNoWorker:
      return absl::UnavailableError("no healthy worker can take the request");
    case RouteVerdict::kNoFitNow:
      break;
  }
  return absl::InternalError("a request that must wait has no final outcome");
}

}  // namespace

AdmissionQueue::AdmissionQueue(ClusterBooks* books, const AdmissionOptions& options)
    : books_(books), options_(options) {
  books_->SetCapacityListener([this] { Retry(); });
}

AdmissionQueue::~AdmissionQueue() {
  books_->SetCapacityListener(nullptr);
  std::vector<Completion> completions;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [key, waiter] : waiters_) {
      completions.push_back(Completion{std::move(waiter.done),
                                       absl::UnavailableError("the router is shutting down")});
    }
    waiters_.clear();
    priority_of_.clear();
  }
  Run(completions);
}

uint64_t AdmissionQueue::Submit(AdmissionRequest request, AdmissionCallback done) {
  // Hashing the prompt is the expensive part; it needs no lock.
  PreparedRoute prepared = books_->Prepare(std::move(request.route));
  std::vector<Completion> completions;
  uint64_t ticket = 0;
  {
    absl::MutexLock lock(&mu_);
    if (request.deadline <= absl::Now()) {
      completions.push_back(Completion{
          std::move(done), absl::DeadlineExceededError("deadline passed before admission")});
    } else {
      const bool may_bypass = waiters_.empty() || request.priority > -waiters_.begin()->first.first;
      const RoutingDecision decision =
          may_bypass ? books_->Route(prepared) : books_->Evaluate(prepared);
      const bool must_wait = decision.verdict == RouteVerdict::kNoFitNow ||
                             (decision.verdict == RouteVerdict::kRouted && !may_bypass);
      if (!must_wait) {
        completions.push_back(Completion{std::move(done), Outcome(decision)});
      } else if (static_cast<int>(waiters_.size()) >= options_.max_waiting_requests) {
        completions.push_back(
            Completion{std::move(done),
                       absl::ResourceExhaustedError(absl::StrCat(
                           "admission queue is full (", waiters_.size(), " requests waiting)"))});
      } else {
        ticket = next_ticket_++;
        waiters_.emplace(Key{-request.priority, ticket},
                         Waiter{std::move(prepared), request.deadline, std::move(done)});
        priority_of_.emplace(ticket, request.priority);
      }
    }
  }
  Run(completions);
  return ticket;
}

bool AdmissionQueue::Cancel(uint64_t ticket) {
  std::vector<Completion> completions;
  bool removed = false;
  {
    absl::MutexLock lock(&mu_);
    removed =
        Remove(ticket, absl::CancelledError("cancelled while waiting for admission"), &completions);
    // The head may have been holding back smaller waiters.
    if (removed) AdmitWaiters(&completions);
  }
  Run(completions);
  return removed;
}

absl::StatusOr<RoutingDecision> AdmissionQueue::Admit(AdmissionRequest request,
                                                      const std::function<bool()>& is_cancelled) {
  // Shared with the callback, which may run on another thread after this call gave up waiting.
  struct State {
    absl::Notification done;
    absl::StatusOr<RoutingDecision> outcome;
  };
  auto state = std::make_shared<State>();
  const absl::Time deadline = request.deadline;
  const uint64_t ticket =
      Submit(std::move(request), [state](absl::StatusOr<RoutingDecision> outcome) {
        state->outcome = std::move(outcome);
        state->done.Notify();
      });
  while (ticket != 0 && !state->done.HasBeenNotified()) {
    const absl::Time wake =
        is_cancelled ? std::min(deadline, absl::Now() + options_.cancel_poll_interval) : deadline;
    if (state->done.WaitForNotificationWithDeadline(wake)) break;
    if (is_cancelled && is_cancelled()) {
      Cancel(ticket);
      break;
    }
    if (absl::Now() >= deadline) {
      std::vector<Completion> completions;
      {
        absl::MutexLock lock(&mu_);
        if (Remove(ticket,
                   absl::DeadlineExceededError("deadline passed while waiting for a worker"),
                   &completions)) {
          AdmitWaiters(&completions);
        }
      }
      Run(completions);
      break;
    }
  }
  // Either this thread completed the waiter above, or another thread is delivering its outcome.
  state->done.WaitForNotification();
  return state->outcome;
}

void AdmissionQueue::Retry() {
  std::vector<Completion> completions;
  {
    absl::MutexLock lock(&mu_);
    AdmitWaiters(&completions);
  }
  Run(completions);
}

int AdmissionQueue::ExpireOverdue(absl::Time now) {
  std::vector<Completion> completions;
  {
    absl::MutexLock lock(&mu_);
    ExpireLocked(now, &completions);
    if (!completions.empty()) AdmitWaiters(&completions);
  }
  const int expired = static_cast<int>(
      std::count_if(completions.begin(), completions.end(), [](const Completion& completion) {
        return absl::IsDeadlineExceeded(completion.outcome.status());
      }));
  Run(completions);
  return expired;
}

int AdmissionQueue::num_waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

bool AdmissionQueue::Remove(uint64_t ticket, absl::Status status,
                            std::vector<Completion>* completions) {
  auto priority = priority_of_.find(ticket);
  if (priority == priority_of_.end()) return false;
  auto it = waiters_.find(Key{-priority->second, ticket});
  completions->push_back(Completion{std::move(it->second.done), std::move(status)});
  waiters_.erase(it);
  priority_of_.erase(priority);
  return true;
}

void AdmissionQueue::AdmitWaiters(std::vector<Completion>* completions) {
  ExpireLocked(absl::Now(), completions);
  while (!waiters_.empty()) {
    auto head = waiters_.begin();
    const RoutingDecision decision = books_->Route(head->second.prepared);
    if (decision.verdict == RouteVerdict::kNoFitNow) break;  // strict order: the rest wait too
    completions->push_back(Completion{std::move(head->second.done), Outcome(decision)});
    priority_of_.erase(head->first.second);
    waiters_.erase(head);
  }
}

void AdmissionQueue::ExpireLocked(absl::Time now, std::vector<Completion>* completions) {
  std::vector<uint64_t> overdue;
  for (const auto& [key, waiter] : waiters_) {
    if (waiter.deadline <= now) overdue.push_back(key.second);
  }
  for (uint64_t ticket : overdue) {
    Remove(ticket, absl::DeadlineExceededError("deadline passed while waiting for a worker"),
           completions);
  }
}

void AdmissionQueue::Run(std::vector<Completion>& completions) {
  for (Completion& completion : completions) completion.done(std::move(completion.outcome));
}

}  // namespace kvserve
