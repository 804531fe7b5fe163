// The router's log line for a request refused before it ran (base/log.h), one spelling for the
// refusals of RouterApi (authentication, validation) and of admission (queue full, no worker,
// deadline): `request_refused id= reason= code= error=` (WARNING). The lines of a request that
// ran (request_done, request_migrated) are GenerateCall's (generate_call.cc).
//
// Thread-safety: a plain function.
#ifndef KVSERVE_ROUTER_REQUEST_LOG_H_
#define KVSERVE_ROUTER_REQUEST_LOG_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvserve {

// `id` as the client sent it ("" when it sent none); `reason` a short label (the metric's).
void LogRequestRefused(absl::string_view id, absl::string_view reason, const absl::Status& status);

}  // namespace kvserve

#endif  // KVSERVE_ROUTER_REQUEST_LOG_H_
