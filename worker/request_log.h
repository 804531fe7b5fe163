// The worker's log lines about requests (base/log.h): one `request_done` per request at its end,
// one `request_refused` per request refused before it reached the engine. Each names the request
// by the id its client (or the router, passing its client's) gave, the id the router's lines use.
//
// Thread-safety: plain functions; LogRequestDone runs on the engine thread (an EngineObserver's
// callback), so it only formats and writes one line.
#ifndef KVSERVE_WORKER_REQUEST_LOG_H_
#define KVSERVE_WORKER_REQUEST_LOG_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/engine_observer.h"

namespace kvserve {

// `request_done id= prompt_tokens= cached_tokens= output_tokens= ttft_ms= total_ms= queue_ms=
// preemptions= finish= code= [error=]` (INFO, whatever the outcome: `code` says it).
void LogRequestDone(const RequestMetrics& request);
// `request_refused id= code= error=` (WARNING).
void LogRequestRefused(absl::string_view id, const absl::Status& status);

}  // namespace kvserve

#endif  // KVSERVE_WORKER_REQUEST_LOG_H_
