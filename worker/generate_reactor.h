// GenerateReactor: serves one server-streaming Generate call (Generation.Generate and
// Worker.Generate alike) from an engine RequestStream, in the gRPC callback style.
//
// Flow: the stream's notifier (engine thread) and OnWriteDone (gRPC thread) both call Pump(),
// which writes the next EngineOutput as a GenerateResponse when no write is in flight; when the
// stream ends, the call finishes with the stream's final status. A client cancel or an expired
// deadline (OnCancel) aborts the engine request, which frees its KV blocks before the next step;
// the call then finishes once the engine has closed the stream.
//
// Ownership: gRPC owns the reactor; it deletes itself in OnDone. The notifier reaches it through
// a shared Link that OnDone clears, so a late notification never touches a deleted reactor.
//
// Thread-safety: all entry points synchronise on Link::mu (held only to decide, never across a
// gRPC call).
#ifndef KVSERVE_WORKER_GENERATE_REACTOR_H_
#define KVSERVE_WORKER_GENERATE_REACTOR_H_

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/serving_context.h"

namespace kvserve {

class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // A reactor for `started`, or one that finishes at once with its error.
  static GenerateReactor* Create(ServingContext* context, absl::StatusOr<StartedRequest> started);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  struct Link {
    absl::Mutex mu;
    GenerateReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  GenerateReactor(ServingContext* context, StartedRequest started);
  explicit GenerateReactor(const absl::Status& error);

  // What Pump decided; the gRPC call is made after link_->mu is released, so that gRPC never
  // runs (or inlines) a reaction while we hold it. No reaction can delete the reactor between
  // the decision and the call: OnDone comes only after Finish.
  enum class Action { kNone, kWrite, kFinish };
  // Decides the next step. REQUIRES: link_->mu held.
  Action Plan();
  // Carries out Plan's decision. REQUIRES: link_->mu not held.
  void Execute(Action action);
  // Plan + Execute from a thread that does not hold the lock.
  void Pump();

  ServingContext* const context_ = nullptr;
  const StartedRequest started_;
  const std::shared_ptr<Link> link_ = std::make_shared<Link>();
  // Guarded by link_->mu (annotations cannot name a member of a pointee).
  grpc::ByteBuffer write_buffer_;
  bool write_in_flight_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

}  // namespace kvserve

#endif  // KVSERVE_WORKER_GENERATE_REACTOR_H_
