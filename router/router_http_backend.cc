#include "router/router_http_backend.h"

#include <functional>
#include <mutex>
#include <optional>
#include <utility>

#include "base/status_macros.h"
#include "router/generate_call.h"
#include "router/request_log.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

// What the HTTP stream and the GenerateCall's client side share: the message in flight, the
// end, and whether the call may still be reached.
struct HttpCallState {
  std::mutex mu;
  std::optional<v1::GenerateResponse> message;  // sent, not yet read (one at a time)
  std::optional<absl::Status> end;
  std::function<void()> notifier;
  GenerateCall* call = nullptr;
  bool call_alive = false;   // until the client side is done (End): holds may be taken
  bool reader_gone = false;  // the stream was destroyed: sends fail

  // A hold on the call if it is still alive, so it can be reached without the lock.
  GenerateCall* HoldCallLocked() {
    if (!call_alive) return nullptr;
    call->AddHold();
    return call;
  }
};

// The GenerateCall's client side for an HTTP request; the call owns it (AdoptClient). It shares
// HttpCallState with the HttpGenerationStream the front end reads.
class HttpGenerateClient final : public GenerateClient {
 public:
  HttpGenerateClient(std::shared_ptr<HttpCallState> state, absl::Time deadline)
      : state_(std::move(state)), deadline_(deadline) {}

  std::unique_ptr<grpc::ClientContext> NewWorkerContext() override {
    auto context = std::make_unique<grpc::ClientContext>();
    if (deadline_ != absl::InfiniteFuture()) context->set_deadline(absl::ToChronoTime(deadline_));
    return context;
  }

  void Send(const v1::GenerateResponse& message) override {
    std::function<void()> notify;
    GenerateCall* call = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->reader_gone) {
        call = state_->call;  // alive: we are inside one of its reactions
      } else {
        state_->message = message;
        notify = state_->notifier;
      }
    }
    if (call != nullptr) call->OnWriteDone(false);
    if (notify) notify();
  }

  void End(const absl::Status& status) override {
    std::function<void()> notify;
    GenerateCall* call = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->end = status;
      state_->call_alive = false;
      call = state_->call;
      notify = state_->notifier;
    }
    if (notify) notify();
    // The client side is done: the call may go once its worker call did. It owns this object
    // (it was handed over at Create), so nothing of `this` may be used after this line.
    call->OnClientDone();
  }

 private:
  const std::shared_ptr<HttpCallState> state_;
  const absl::Time deadline_;
};

class HttpGenerationStream final : public GenerationStream {
 public:
  explicit HttpGenerationStream(std::shared_ptr<HttpCallState> state) : state_(std::move(state)) {}

  ~HttpGenerationStream() override {
    GenerateCall* call = nullptr;
    bool had_message = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->reader_gone = true;
      state_->notifier = nullptr;
      had_message = state_->message.has_value();
      state_->message.reset();
      call = state_->HoldCallLocked();
    }
    if (call == nullptr) return;
    call->OnCancel();
    if (had_message) call->OnWriteDone(false);  // the send the reader will never take
    call->Unref();
  }

  void SetNotifier(std::function<void()> notifier) override {
    bool ready = false;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->notifier = notifier;
      ready = state_->message.has_value() || state_->end.has_value();
    }
    if (ready) notifier();
  }

  ReadResult Read(v1::GenerateResponse* out) override {
    GenerateCall* call = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (!state_->message.has_value()) {
        return state_->end.has_value() ? ReadResult::kEnd : ReadResult::kEmpty;
      }
      *out = *std::move(state_->message);
      state_->message.reset();
      call = state_->HoldCallLocked();
    }
    if (call != nullptr) {
      call->OnWriteDone(true);  // the call may send the next message
      call->Unref();
    }
    return ReadResult::kMessage;
  }

  absl::Status final_status() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->end.value_or(absl::OkStatus());
  }

  void Cancel() override {
    GenerateCall* call = nullptr;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      call = state_->HoldCallLocked();
    }
    if (call == nullptr) return;
    call->OnCancel();
    call->Unref();
  }

 private:
  const std::shared_ptr<HttpCallState> state_;
};

}  // namespace

RouterHttpBackend::RouterHttpBackend(RouterApi* api, GenerateProxy* proxy)
    : api_(api), proxy_(proxy) {}

absl::StatusOr<std::string> RouterHttpBackend::TenantOf(const CallContext& call) const {
  std::optional<absl::string_view> authorization;
  if (call.authorization.has_value()) authorization = *call.authorization;
  return api_->Authenticate(authorization);
}

absl::Status RouterHttpBackend::Authenticate(const CallContext& call) const {
  absl::Status status = TenantOf(call).status();
  if (!status.ok()) LogRequestRefused(call.request_id, "unauthenticated", status);
  return status;
}

bool RouterHttpBackend::Serving() const { return serving_ && api_->AnyWorkerServing(); }

absl::StatusOr<std::unique_ptr<GenerationStream>> RouterHttpBackend::Generate(
    const CallContext& call, const v1::GenerateRequest& request) {
  absl::StatusOr<ProxiedRequest> resolved = [&]() -> absl::StatusOr<ProxiedRequest> {
    if (!serving_) return absl::UnavailableError("the router is draining");
    KVSERVE_ASSIGN_OR_RETURN(std::string tenant, TenantOf(call));
    return api_->ResolveGenerate(request, tenant);
  }();
  if (!resolved.ok()) {
    api_->RecordRefused(resolved.status(), request.request_id());
    return resolved.status();
  }
  auto state = std::make_shared<HttpCallState>();
  auto client = std::make_unique<HttpGenerateClient>(state, call.deadline);
  GenerateCall* generate =
      GenerateCall::Create(proxy_, client.get(), *std::move(resolved), call.deadline);
  generate->AdoptClient(std::move(client));
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->call = generate;
    state->call_alive = true;
  }
  auto stream = std::make_unique<HttpGenerationStream>(state);
  generate->Begin();
  return stream;
}

absl::StatusOr<v1::TokenizeResponse> RouterHttpBackend::Tokenize(
    const CallContext& call, const v1::TokenizeRequest& request) {
  KVSERVE_RETURN_IF_ERROR(Authenticate(call));
  return api_->Tokenize(request);
}

absl::StatusOr<v1::DetokenizeResponse> RouterHttpBackend::Detokenize(
    const CallContext& call, const v1::DetokenizeRequest& request) {
  KVSERVE_RETURN_IF_ERROR(Authenticate(call));
  return api_->Detokenize(request);
}

absl::StatusOr<v1::ModelInfo> RouterHttpBackend::GetModelInfo(const CallContext& call,
                                                              absl::string_view model) {
  KVSERVE_RETURN_IF_ERROR(Authenticate(call));
  v1::GetModelInfoRequest request;
  request.set_model(std::string(model));
  return api_->GetModelInfo(request);
}

}  // namespace kvserve
