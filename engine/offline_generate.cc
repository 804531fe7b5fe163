#include "engine/offline_generate.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "engine/request_stream.h"

namespace kvserve {

absl::StatusOr<OfflineStats> GenerateOffline(
    EngineCore& core, std::vector<EngineRequest> requests, std::vector<OfflineResult>* results,
    const std::function<void(size_t, const EngineOutput&)>& on_output) {
  OfflineStats stats;
  results->assign(requests.size(), OfflineResult{});
  std::vector<std::shared_ptr<RequestStream>> streams;
  const absl::Time start = absl::Now();
  for (EngineRequest& request : requests) {
    KVSERVE_RETURN_IF_ERROR(core.ValidateRequest(request));
    stats.prompt_tokens += static_cast<int64_t>(request.prompt_token_ids.size());
    auto stream = std::make_shared<RequestStream>(request.request_id);
    KVSERVE_RETURN_IF_ERROR(core.AddRequest(core.MakeRequest(std::move(request), stream, start)));
    streams.push_back(std::move(stream));
  }
  std::vector<bool> started(streams.size(), false);
  size_t num_started = 0;
  absl::Time first_tokens = start;
  absl::Time last_token = start;
  while (core.has_work()) {
    KVSERVE_RETURN_IF_ERROR(core.Step());
    ++stats.steps;
    const absl::Time now = absl::Now();
    for (size_t i = 0; i < streams.size(); ++i) {
      EngineOutput output;
      while (streams[i]->Pop(absl::ZeroDuration(), &output) == RequestStream::PopResult::kOutput) {
        for (const ChoiceOutput& choice : output.choices) {
          stats.generated_tokens += static_cast<int64_t>(choice.token_ids.size());
          if (!choice.token_ids.empty()) last_token = now;
          if (choice.index != 0) continue;
          OfflineResult& result = (*results)[i];
          result.token_ids.insert(result.token_ids.end(), choice.token_ids.begin(),
                                  choice.token_ids.end());
          result.text += choice.text;
          if (choice.finish_reason != FinishReason::kNone)
            result.finish_reason = choice.finish_reason;
          if (!started[i] && !choice.token_ids.empty()) {
            started[i] = true;
            if (++num_started == streams.size()) first_tokens = now;
          }
        }
        if (on_output) on_output(i, output);
      }
    }
  }
  for (const std::shared_ptr<RequestStream>& stream : streams) {
    if (absl::Status status = stream->final_status(); !status.ok()) {
      return absl::InternalError(
          absl::StrCat("request ", stream->request_id(), " ended with ", status.ToString()));
    }
  }
  if (num_started < streams.size()) first_tokens = last_token;
  stats.prefill_seconds = absl::ToDoubleSeconds(first_tokens - start);
  stats.decode_seconds = absl::ToDoubleSeconds(last_token - first_tokens);
  return stats;
}

}  // namespace kvserve
