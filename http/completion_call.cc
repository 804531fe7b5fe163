#include "http/completion_call.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "http/error_mapping.h"
#include "http/openai_front_end.h"

namespace kvserve {

CompletionCall::CompletionCall(OpenAiRequest request, std::string model, std::string request_id,
                               std::shared_ptr<HttpExchange> exchange)
    : request_(std::move(request)),
      builder_(request_,
               absl::StrCat(
                   request_.endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                   request_id),
               std::move(model), absl::ToUnixSeconds(absl::Now())),
      exchange_(std::move(exchange)) {}

CompletionCall::~CompletionCall() { CancelAll(); }

absl::string_view CompletionCall::input_field() const {
  return request_.endpoint == OpenAiEndpoint::kChatCompletions ? "messages" : "prompt";
}

void CompletionCall::Start(GenerationBackend* backend, const CallContext& call) {
  self_ = shared_from_this();
  for (const kvserve::v1::GenerateRequest& prompt : request_.requests) {
    absl::StatusOr<std::unique_ptr<GenerationStream>> stream = backend->Generate(call, prompt);
    if (!stream.ok()) {
      Fail(stream.status());
      return;
    }
    streams_.push_back(*std::move(stream));
    ended_.push_back(false);
  }
  std::weak_ptr<CompletionCall> weak = self_;
  exchange_->SetCloseCallback([weak, exchange = std::weak_ptr<HttpExchange>(exchange_)] {
    // The client is gone: stop generating now (this may run off the strand, and Cancel is
    // thread-safe); the call then ends through Pump as the streams close.
    if (auto call = weak.lock()) {
      for (auto& stream : call->streams_) stream->Cancel();
    }
  });
  if (call.deadline != absl::InfiniteFuture()) {
    exchange_->RunAfter(call.deadline - absl::Now(), [weak] {
      if (auto call = weak.lock()) {
        call->Fail(absl::DeadlineExceededError("the request's deadline passed"));
      }
    });
  }
  if (request_.stream) {
    exchange_->StartStream(200, "text/event-stream");
    stream_started_ = true;
  }
  for (auto& stream : streams_) {
    stream->SetNotifier([weak] {
      if (auto call = weak.lock()) call->SchedulePump();
    });
  }
}

void CompletionCall::SchedulePump() {
  if (pump_scheduled_.exchange(true)) return;
  std::weak_ptr<CompletionCall> weak = weak_from_this();
  exchange_->Post([weak] {
    if (auto call = weak.lock()) {
      call->pump_scheduled_.store(false);
      call->Pump();
    }
  });
}

void CompletionCall::Pump() {
  if (done_) return;
  kvserve::v1::GenerateResponse response;
  for (size_t i = 0; i < streams_.size(); ++i) {
    while (!ended_[i]) {
      const GenerationStream::ReadResult result = streams_[i]->Read(&response);
      if (result == GenerationStream::ReadResult::kEmpty) break;
      if (result == GenerationStream::ReadResult::kEnd) {
        ended_[i] = true;
        if (absl::Status status = streams_[i]->final_status(); !status.ok()) {
          Fail(status);
          return;
        }
        break;
      }
      if (request_.stream) {
        for (std::string& chunk : builder_.Chunks(static_cast<int>(i), response)) {
          exchange_->WriteChunk(absl::StrCat("data: ", chunk, "\n\n"));
        }
      } else {
        builder_.Add(static_cast<int>(i), response);
      }
    }
  }
  for (bool ended : ended_) {
    if (!ended) return;
  }
  Finish();
}

void CompletionCall::Finish() {
  done_ = true;
  if (request_.stream) {
    if (request_.include_usage) {
      exchange_->WriteChunk(absl::StrCat("data: ", builder_.UsageChunk(), "\n\n"));
    }
    exchange_->WriteChunk("data: [DONE]\n\n");
    exchange_->EndStream();
  } else {
    exchange_->Respond(200, "application/json", builder_.Body());
  }
  self_.reset();
}

void CompletionCall::CancelAll() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (!ended_[i]) streams_[i]->Cancel();
  }
}

void CompletionCall::Fail(const absl::Status& status) {
  if (done_) return;
  done_ = true;
  CancelAll();
  if (stream_started_) {
    // The headers are out: the error travels as an event, as vLLM does.
    exchange_->WriteChunk(
        absl::StrCat("data: ", ErrorJson(ToHttpError(status, input_field())), "\n\n"));
    exchange_->WriteChunk("data: [DONE]\n\n");
    exchange_->EndStream();
  } else {
    RespondError(*exchange_, status, input_field());
  }
  self_.reset();
}

}  // namespace kvserve
