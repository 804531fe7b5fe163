// WritePump<Message>: the write loop the worker's server-streaming reactors (GenerateReactor,
// StatusReactor) are built on, in the gRPC callback style. The source (an engine RequestStream
// or StatusSubscription) calls Notifier() when it has something new, and OnWriteDone pumps
// too; each time the pump decides under its lock what comes next (nothing, write one message,
// or finish) and carries that out after releasing the lock, so that gRPC never runs (or
// inlines) a reaction while the lock is held. No reaction can delete the reactor between the
// decision and the call: OnDone comes only after Finish.
//
// A subclass says how its source is read (PlanNext) and stopped (StopSource). The pump keeps the
// write-in-flight / cancelled / finished state and the cancel rule: once the call is cancelled
// (the client left, its deadline passed, or a write failed) the source is stopped, nothing more
// is written and the call finishes with CANCELLED.
//
// Ownership: gRPC owns the reactor; it deletes itself in OnDone. The notifier reaches it through
// a shared Link that OnDone clears, so a late notification never touches a deleted reactor.
//
// Thread-safety: every entry point synchronises on Link::mu, never held across a gRPC call.
#ifndef KVSERVE_WORKER_WRITE_PUMP_H_
#define KVSERVE_WORKER_WRITE_PUMP_H_

#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include <functional>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvserve {

template <typename Message>
class WritePump : public grpc::ServerWriteReactor<Message> {
 public:
  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&link_->mu);
      write_in_flight_ = false;
      if (!ok) cancelled_ = true;  // the stream broke: as a cancel (gRPC may call OnCancel too)
    }
    if (!ok) StopSource();
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&link_->mu);
      cancelled_ = true;
    }
    StopSource();
    Pump();
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&link_->mu);
      link_->reactor = nullptr;
    }
    delete this;
  }

 protected:
  // What Plan decided; carried out by Execute once the lock is released.
  enum class Action { kNone, kWrite, kFinish };

  WritePump() {
    absl::MutexLock lock(&link_->mu);
    link_->reactor = this;
  }

  // The next step from the source, asked only while no write is in flight and the call is live:
  // Write(message), FinishWith(status), or kNone when the source has nothing now (it notifies
  // again). REQUIRES: the pump's lock held (it is, whenever the pump calls it).
  virtual Action PlanNext() = 0;
  // Stops the source after a cancel (aborts the engine request, closes the subscription).
  // Called without the lock; may be called more than once.
  virtual void StopSource() = 0;

  // For PlanNext. REQUIRES: the pump's lock held.
  Action Write(Message message) {
    writing_ = std::move(message);
    write_in_flight_ = true;
    return Action::kWrite;
  }
  Action FinishWith(grpc::Status status) {
    finished_ = true;
    final_status_ = std::move(status);
    return Action::kFinish;
  }

  // Ends the call at once, before anything was written (a refused request). Call from the
  // subclass's constructor only.
  void FinishNow(grpc::Status status) {
    {
      absl::MutexLock lock(&link_->mu);
      finished_ = true;
    }
    this->Finish(std::move(status));
  }

  // For the source's SetNotifier: pumps (from any thread) while the reactor lives.
  std::function<void()> Notifier() {
    return [link = link_] {
      WritePump* reactor = nullptr;
      Action action = Action::kNone;
      {
        absl::MutexLock lock(&link->mu);
        if (link->reactor == nullptr) return;
        reactor = link->reactor;
        action = reactor->Plan();
      }
      reactor->Execute(action);
    };
  }

  // Plan + Execute from a thread that does not hold the lock.
  void Pump() {
    Action action;
    {
      absl::MutexLock lock(&link_->mu);
      action = Plan();
    }
    Execute(action);
  }

 private:
  struct Link {
    absl::Mutex mu;
    WritePump* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  // Decides the next step. REQUIRES: link_->mu held.
  Action Plan() {
    if (finished_ || write_in_flight_) return Action::kNone;
    // The client is gone (the source was stopped); nothing more can be written.
    if (cancelled_) {
      return FinishWith(grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled"));
    }
    return PlanNext();
  }

  // Carries out Plan's decision. REQUIRES: link_->mu not held.
  void Execute(Action action) {
    if (action == Action::kWrite) this->StartWrite(&writing_);
    if (action == Action::kFinish) this->Finish(final_status_);
  }

  const std::shared_ptr<Link> link_ = std::make_shared<Link>();
  // Guarded by link_->mu (annotations cannot name a member of a pointee).
  Message writing_;
  bool write_in_flight_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_WRITE_PUMP_H_
