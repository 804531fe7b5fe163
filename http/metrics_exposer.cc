#include "http/metrics_exposer.h"

#include <exception>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& metrics_listen, const std::shared_ptr<prometheus::Collectable>& metrics) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(metrics_listen);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_listen: cannot listen on ", metrics_listen, ": ", e.what()));
  }
  exposer->RegisterCollectable(metrics);
  return exposer;
}

int ExposerPort(const prometheus::Exposer& exposer) {
  const std::vector<int> ports = exposer.GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace kvserve
