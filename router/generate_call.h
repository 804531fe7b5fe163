// GenerateCall: one client Generate call proxied through the cluster (generate_proxy.h says what
// it does), whatever transport the client came in on. Its worker calls are gRPC callback client
// reactors (Upstream); its client side is a GenerateClient: the gRPC server-streaming reactor of
// the client's call (GrpcGenerateReactor, generate_call.cc) or the router's HTTP front end
// (router_http_backend.h). No thread is held while the request waits for admission (the queue's
// callback resumes it) or streams.
//
// Its parts, in the order a request meets them:
//   Admit          route now or wait in the AdmissionQueue (callback: OnAdmitted)
//   OpenUpstream   Worker.Generate on the chosen worker, watched by its WorkerConnection; with
//                  the decision's KV source when it planned a block transfer
//   OnUpstreamMessage / OnWriteDone
//                  forward: one worker message read, rewritten (RequestProgress), sent to the
//                  client; the next read starts when the client took it (flow control)
//   OnUpstreamDone the worker call ended: finish, or migrate (Admit again, excluding the worker)
//   EndWith        end the client call once no send, admission or worker call is pending
//
// Log lines (base/log.h), each with the client's request id (which every worker call carries as
// x-request-id metadata, so the workers' lines name it the same): `request_refused` when
// admission refuses it, `request_migrated` when it moves (from, to, tokens so far, reason),
// `request_done` at its end (tenant, workers, prompt / cached / output tokens, TTFT, total time,
// migrations, status).
//
// Ownership: counted holds. The client side holds one from Create until it calls OnClientDone
// (the transport is done with the call); each pending admission callback and each live worker
// call holds one; the call deletes itself when the last goes. The worker call holds a hold on the
// GenerateCall; the GenerateCall owns the worker call (shared, so OnCancel can cancel it without
// racing its end). The Upstream keeps a ClientReadReactor hold from its start until the
// GenerateCall will read no more, so its OnDone never comes while a read may start.
//
// Thread-safety: every entry point (reactions of both sides, the admission callback) takes `mu_`
// only to decide; calls to gRPC and to the client side are made after releasing it.
#ifndef KVSERVE_ROUTER_GENERATE_CALL_H_
#define KVSERVE_ROUTER_GENERATE_CALL_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kvserve/v1/generation.pb.h"
#include "router/generate_proxy.h"
#include "router/request_progress.h"

namespace kvserve {

// The client's end of a GenerateCall: the transport its request came in on.
class GenerateClient {
 public:
  virtual ~GenerateClient() = default;
  // The context of a worker call made for this client: it carries the client's deadline (and,
  // for gRPC, its cancellation).
  virtual std::unique_ptr<grpc::ClientContext> NewWorkerContext() = 0;
  // Sends one message; the call's OnWriteDone(ok) follows once the client took it (it may come
  // on this thread before Send returns). One message at a time.
  virtual void Send(const kvserve::v1::GenerateResponse& message) = 0;
  // Ends the client's call with `status` (after every Send completed). The transport calls the
  // call's OnClientDone once it is done with it (it may before End returns).
  virtual void End(const absl::Status& status) = 0;
};

class GenerateCall final {
 public:
  // A call for `request` that `client` (borrowed until OnClientDone) serves; `deadline` is the
  // client's. Nothing runs until Begin.
  static GenerateCall* Create(GenerateProxy* proxy, GenerateClient* client, ProxiedRequest request,
                              absl::Time deadline);
  // The call owns `client` from now on (a client side that has no owner of its own).
  void AdoptClient(std::unique_ptr<GenerateClient> client) { owned_client_ = std::move(client); }
  // Starts admitting the request.
  void Begin() { Admit(); }

  // The client side's reactions.
  void OnWriteDone(bool ok);
  void OnCancel();  // the client cancelled, left, or its deadline passed
  void OnClientDone() { Unref(); }
  // A hold keeps the call alive across a reaction started from outside (the HTTP side takes one
  // under its own lock while it knows the call is alive).
  void AddHold();
  void Unref();

 private:
  class Upstream;

  // What a decision made under mu_ asks for; carried out by Execute without the lock.
  struct Actions {
    std::shared_ptr<Upstream> cancel;        // TryCancel the worker call
    bool write = false;                      // client_->Send(write_message_)
    std::shared_ptr<Upstream> read;          // start the next read
    std::shared_ptr<Upstream> release_hold;  // no more reads: let the worker call end
    std::optional<absl::Status> finish;      // End the client call
  };

  GenerateCall(GenerateProxy* proxy, GenerateClient* client, ProxiedRequest request,
               absl::Time deadline);
  ~GenerateCall();

  void Admit();
  void OnAdmitted(AdmissionOutcome outcome);
  // Opens Worker.Generate on `decision`'s worker (with its KV source, if it planned one).
  void OpenUpstream(const RoutingDecision& decision, std::shared_ptr<WorkerConnection> worker);
  void OnUpstreamMessage(Upstream* upstream);
  void OnUpstreamEnd();
  void OnUpstreamDone(Upstream* upstream, absl::Status status, bool lost);
  // Finishes the client call with `status` once nothing is pending. A request whose choices all
  // finished and that lacks only its usage message sends it and ends OK instead of `status`
  // when `usage_may_end` (the failure was the worker's, after the last token).
  void EndWith(absl::Status status, bool usage_may_end = false);

  // The next steps once state changed. REQUIRES: mu_ held.
  void PlanLocked(Actions* actions) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Execute(Actions actions);
  // The request_done line of a call that ends with `status`.
  void LogDone(const absl::Status& status);

  GenerateProxy* const proxy_;
  GenerateClient* const client_;
  std::unique_ptr<GenerateClient> owned_client_;  // client_, when the call owns it
  const ProxiedRequest request_;
  const absl::Time deadline_;
  const absl::Time start_ = absl::Now();

  absl::Mutex mu_;
  int holds_ ABSL_GUARDED_BY(mu_) = 1;  // the client side's, until OnClientDone
  RequestProgress progress_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> failed_workers_ ABSL_GUARDED_BY(mu_);
  int attempt_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_failure_ ABSL_GUARDED_BY(mu_);
  // For the log: every worker a call was opened on, in order; the worker a migration leaves
  // ("" when none is under way); when the first message reached the client; the cached prompt
  // tokens the finishing worker reported.
  std::vector<std::string> workers_ ABSL_GUARDED_BY(mu_);
  std::string migrating_from_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> first_message_time_ ABSL_GUARDED_BY(mu_);
  int64_t cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
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
  // Set under mu_ while no write is in flight; the client side reads it during Send.
  kvserve::v1::GenerateResponse write_message_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;    // OnCancel: client cancel or deadline
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;  // a write to the client failed
  // The end, once decided: a last message to send first (usage only), then the status.
  std::optional<kvserve::v1::GenerateResponse> last_message_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_GENERATE_CALL_H_
