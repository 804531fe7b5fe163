#include "router/request_log.h"

#include "base/log.h"

namespace kvserve {

void LogRequestRefused(absl::string_view id, absl::string_view reason, const absl::Status& status) {
  KVSERVE_LOG(kWarning, "request_refused").Field("id", id).Field("reason", reason).Status(status);
}

}  // namespace kvserve
