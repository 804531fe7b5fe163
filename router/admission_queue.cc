#include "router/admission_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

// The final outcome of a decision that is not "wait".
AdmissionOutcome Outcome(RoutingDecision decision) {
  switch (decision.verdict) {
    case RouteVerdict::kRouted:
      return AdmissionOutcome{std::move(decision), AdmissionRefusal::kNone};
    case RouteVerdict::kNeverFits:
      return AdmissionOutcome{
          absl::ResourceExhaustedError(
              absl::StrCat("request needs ", decision.needed_blocks,
                           " KV blocks (prompt + max_tokens), more than any worker's whole pool")),
          AdmissionRefusal::kNeverFits};
    case RouteVerdict::kNoWorker:
      return AdmissionOutcome{absl::UnavailableError("no healthy worker can take the request"),
                              AdmissionRefusal::kNoWorker};
    case RouteVerdict::kNoFitNow:
      break;
  }
  return AdmissionOutcome{absl::InternalError("a request that must wait has no final outcome"),
                          AdmissionRefusal::kNoWorker};
}

absl::Status DeadlinePassed() {
  return absl::DeadlineExceededError("deadline passed while waiting for a worker");
}

}  // namespace

absl::string_view RefusalLabel(AdmissionRefusal refusal) {
  switch (refusal) {
    case AdmissionRefusal::kNone:
      return "";
    case AdmissionRefusal::kQueueFull:
      return "queue_full";
    case AdmissionRefusal::kNeverFits:
      return "never_fits";
    case AdmissionRefusal::kNoWorker:
      return "no_worker";
    case AdmissionRefusal::kCancelled:
      return "cancelled";
    case AdmissionRefusal::kDeadline:
      return "deadline";
    case AdmissionRefusal::kShuttingDown:
      return "shutting_down";
  }
  return "";
}

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
      completions.push_back(
          Completion{std::move(waiter.done),
                     AdmissionOutcome{absl::UnavailableError("the router is shutting down"),
                                      AdmissionRefusal::kShuttingDown}});
    }
    waiters_.clear();
    key_of_.clear();
    by_deadline_.clear();
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
    const absl::Time now = absl::Now();
    ExpireLocked(now, &completions);
    if (request.deadline <= now) {
      completions.push_back(Completion{
          std::move(done),
          AdmissionOutcome{absl::DeadlineExceededError("deadline passed before admission"),
                           AdmissionRefusal::kDeadline}});
    } else {
      const Key key{-request.priority, request.deadline, next_ticket_};
      const bool may_bypass = waiters_.empty() || key < waiters_.begin()->first;
      const RoutingDecision decision =
          may_bypass ? books_->Route(prepared) : books_->Evaluate(prepared);
      const bool must_wait = decision.verdict == RouteVerdict::kNoFitNow ||
                             (decision.verdict == RouteVerdict::kRouted && !may_bypass);
      if (!must_wait) {
        completions.push_back(Completion{std::move(done), Outcome(decision)});
      } else if (static_cast<int>(waiters_.size()) >= options_.max_waiting_requests) {
        completions.push_back(Completion{
            std::move(done), AdmissionOutcome{absl::ResourceExhaustedError(absl::StrCat(
                                                  "admission queue is full (", waiters_.size(),
                                                  " requests waiting)")),
                                              AdmissionRefusal::kQueueFull}});
      } else {
        ticket = next_ticket_++;
        waiters_.emplace(key, Waiter{std::move(prepared), std::move(done)});
        key_of_.emplace(ticket, key);
        if (request.deadline != absl::InfiniteFuture()) {
          by_deadline_.emplace(request.deadline, ticket);
        }
      }
    }
  }
  Run(completions);
  return ticket;
}

bool AdmissionQueue::Cancel(uint64_t ticket) {
  std::vector<Completion> completions;
  {
    absl::MutexLock lock(&mu_);
    auto it = key_of_.find(ticket);
    if (it == key_of_.end()) return false;
    RemoveLocked(it->second, absl::CancelledError("cancelled while waiting for admission"),
                 AdmissionRefusal::kCancelled, &completions);
    // The head may have been holding back smaller waiters.
    AdmitWaiters(&completions);
  }
  Run(completions);
  return true;
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
        return completion.outcome.refusal == AdmissionRefusal::kDeadline;
      }));
  Run(completions);
  return expired;
}

int AdmissionQueue::num_waiting() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(waiters_.size());
}

void AdmissionQueue::RemoveLocked(Key key, absl::Status status, AdmissionRefusal refusal,
                                  std::vector<Completion>* completions) {
  auto it = waiters_.find(key);
  const auto& [negated_priority, deadline, ticket] = key;
  completions->push_back(
      Completion{std::move(it->second.done), AdmissionOutcome{std::move(status), refusal}});
  waiters_.erase(it);
  key_of_.erase(ticket);
  by_deadline_.erase({deadline, ticket});
}

void AdmissionQueue::AdmitWaiters(std::vector<Completion>* completions) {
  ExpireLocked(absl::Now(), completions);
  while (!waiters_.empty()) {
    auto head = waiters_.begin();
    RoutingDecision decision = books_->Route(head->second.prepared);
    if (decision.verdict == RouteVerdict::kNoFitNow) break;  // strict order: the rest wait too
    const auto [negated_priority, deadline, ticket] = head->first;
    completions->push_back(Completion{std::move(head->second.done), Outcome(std::move(decision))});
    key_of_.erase(ticket);
    by_deadline_.erase({deadline, ticket});
    waiters_.erase(head);
  }
}

void AdmissionQueue::ExpireLocked(absl::Time now, std::vector<Completion>* completions) {
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    const uint64_t ticket = by_deadline_.begin()->second;
    RemoveLocked(key_of_.at(ticket), DeadlinePassed(), AdmissionRefusal::kDeadline, completions);
  }
}

void AdmissionQueue::Run(std::vector<Completion>& completions) {
  for (Completion& completion : completions) completion.done(std::move(completion.outcome));
}

}  // namespace kvserve
