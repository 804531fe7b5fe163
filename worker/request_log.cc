#include "worker/request_log.h"

#include "base/log.h"
#include "engine/engine_output.h"

namespace kvserve {

void LogRequestDone(const RequestMetrics& request) {
  KVSERVE_LOG(kInfo, "request_done")
      .Field("id", request.log_id)
      .Field("prompt_tokens", request.prompt_tokens)
      .Field("cached_tokens", request.cached_prompt_tokens)
      .Field("output_tokens", request.completion_tokens)
      .FieldMs("ttft_ms", request.time_to_first_token)
      .FieldMs("total_ms", request.e2e_latency)
      .FieldMs("queue_ms", request.queue_time)
      .Field("preemptions", request.num_preemptions)
      .Field("finish", FinishReasonName(request.finish_reason))
      .Status(request.status);
}

void LogRequestRefused(absl::string_view id, const absl::Status& status) {
  KVSERVE_LOG(kWarning, "request_refused").Field("id", id).Status(status);
}

}  // namespace kvserve
