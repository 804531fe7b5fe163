// GenerateCall: one client Generate call proxied through the cluster (generate_proxy.h says what
// it does), in the gRPC callback style on both sides: it is the server-streaming reactor of the
// client's call, and each worker call it makes is a ClientReadReactor (Upstream). No thread is
// held while the request waits for admission (the queue's callback resumes it) or streams.
//
// Its parts, in the order a request meets them:
//   Admit          route now or wait in the AdmissionQueue (callback: OnAdmitted)
//   OpenUpstream   Worker.Generate on the chosen worker, watched by its WorkerConnection
//   OnUpstreamMessage / OnWriteDone
//                  forward: one worker message read, rewritten (RequestProgress), written to the
//                  client; the next read starts when the write is done (flow control)
//   OnUpstreamDone the worker call ended: finish, or migrate (Admit again, excluding the worker)
//   EndWith        finish the client call once no write, admission or worker call is pending
//
// Ownership: gRPC owns the reactor. It deletes itself when gRPC is done with it (OnDone), no
// admission callback is pending and no worker call is alive (a count of holds). The worker call
// holds a hold on the GenerateCall; the GenerateCall owns the worker call (shared, so OnCancel can
// cancel it without racing its end). The Upstream keeps a ClientReadReactor hold from its start
// until the GenerateCall will read no more, so its OnDone never comes while a read may start.
//
// Thread-safety: every entry point (gRPC reactions of both sides, the admission callback) takes
// `mu_` only to decide; gRPC calls are made after releasing it.
#ifndef KVSERVE_ROUTER_GENERATE_CALL_H_
#define KVSERVE_ROUTER_GENERATE_CALL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "router/generate_proxy.h"
#include "router/request_progress.h"

namespace kvserve {

class GenerateCall final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Starts admitting `request` for `call`. gRPC owns the result.
  static GenerateCall* Start(GenerateProxy* proxy, grpc::CallbackServerContext* call,
                             ProxiedRequest request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  class Upstream;

  // What a decision made under mu_ asks for; carried out by Execute without the lock.
  struct Actions {
    std::shared_ptr<Upstream> cancel;        // TryCancel the worker call
    bool write = false;                      // StartWrite(&write_buffer_)
    std::shared_ptr<Upstream> read;          // start the next read
    std::shared_ptr<Upstream> release_hold;  // no more reads: let the worker call end
    std::optional<grpc::Status> finish;      // Finish the client call
  };

  GenerateCall(GenerateProxy* proxy, grpc::CallbackServerContext* call, ProxiedRequest request);

  void Admit();
  void OnAdmitted(AdmissionOutcome outcome);
  void OpenUpstream(const std::string& worker_id, std::shared_ptr<WorkerConnection> worker);
  void OnUpstreamMessage(Upstream* upstream);
  void OnUpstreamEnd();
  void OnUpstreamDone(Upstream* upstream, grpc::Status status, bool lost);
  // Finishes the client call with `status` once nothing is pending. A request whose choices all
  // finished and that lacks only its usage message sends it and ends OK instead of `status`
  // when `usage_may_end` (the failure was the worker's, after the last token).
  void EndWith(grpc::Status status, bool usage_may_end = false);

  // The next steps once state changed. REQUIRES: mu_ held.
  void PlanLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Execute(Actions actions);
  void AddHold();
  void Unref();

  GenerateProxy* const proxy_;
  grpc::CallbackServerContext* const call_;
  const ProxiedRequest request_;
  const absl::Time deadline_;

  absl::Mutex mu_;
  int holds_ ABSL_GUARDED_BY(mu_) = 1;  // gRPC's, until OnDone
  RequestProgress progress_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failed_workers_ ABSL_GUARDED_BY(mu_);
  int attempt_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::Status last_failure_ ABSL_GUARDED_BY(mu_);
  // Admission: a callback is pending; the ticket once Submit returned it.
  bool admitting_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t ticket_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time admission_start_ ABSL_GUARDED_BY(mu_);
  std::thread::id submitter_ ABSL_GUARDED_BY(mu_);
  bool submit_returned_ ABSL_GUARDED_BY(mu_) = false;
  // The worker call in flight, if any.
  std::shared_ptr<Upstream> upstream_ ABSL_GUARDED_BY(mu_);
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // Set under mu_ while no write is in flight; gRPC reads it during the write.
  grpc::ByteBuffer write_buffer_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;    // OnCancel: client cancel or deadline
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;  // a write to the client failed
  // The end, once decided: a last message to send first (usage only), then the status.
  std::optional<grpc::ByteBuffer> last_message_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_GENERATE_CALL_H_
