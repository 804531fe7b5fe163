#include "router/router_server_options.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "tokenizer/chat_template.h"

namespace kvserve {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", message));
}

// Both files of a pair or neither.
absl::Status CheckPair(absl::string_view cert_flag, const std::string& cert,
                       absl::string_view key_flag, const std::string& key) {
  if (cert.empty() && !key.empty())
    return Invalid(cert_flag, absl::StrCat("required with ", key_flag));
  if (!cert.empty() && key.empty())
    return Invalid(key_flag, absl::StrCat("required with ", cert_flag));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateAddress(absl::string_view flag, absl::string_view address,
                             bool allow_port_zero) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return Invalid(flag, absl::StrCat("expected host:port, got '", address, "'"));
  }
  absl::string_view host = address.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') {
    return Invalid(flag, absl::StrCat("unterminated IPv6 host in '", address, "'"));
  }
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535 ||
      (!allow_port_zero && port == 0)) {
    return Invalid(flag, absl::StrCat("bad port in '", address, "'"));
  }
  return absl::OkStatus();
}

std::vector<std::string> StaticWorkerAddresses(const RouterServerOptions& options) {
  std::vector<std::string> addresses;
  for (absl::string_view part : absl::StrSplit(options.workers, ',', absl::SkipWhitespace())) {
    addresses.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return addresses;
}

absl::Status RouterServerOptions::Validate() const {
  KVSERVE_RETURN_IF_ERROR(ValidateAddress("--listen", listen, true));
  KVSERVE_RETURN_IF_ERROR(ValidateAddress("--metrics_listen", metrics_listen, true));
  if (workers.empty() == workers_dns.empty()) {
    return Invalid("--workers", "give exactly one of --workers and --workers_dns");
  }
  if (!workers.empty()) {
    const std::vector<std::string> addresses = StaticWorkerAddresses(*this);
    if (addresses.empty()) return Invalid("--workers", "no address given");
    for (const std::string& address : addresses) {
      KVSERVE_RETURN_IF_ERROR(ValidateAddress("--workers", address, false));
    }
  } else
    KVSERVE_RETURN_IF_ERROR(ValidateAddress("--workers_dns", workers_dns, false));
  if (!(dns_refresh_s > 0)) {
    return Invalid("--dns_refresh_s", absl::StrCat("must be > 0, got ", dns_refresh_s));
  }
  if (model.empty()) return Invalid("--model", "required (the tokenizer is read from it)");
  if (!chat_template.empty()) KVSERVE_RETURN_IF_ERROR(ReadChatTemplateFile(chat_template).status());
  if (http_port < -1 || http_port > 65535) {
    return Invalid("--http_port",
                   absl::StrCat("must be -1 (off) or a port 0..65535, got ", http_port));
  }
  if (max_migrations < 0) {
    return Invalid("--max_migrations", absl::StrCat("must be >= 0, got ", max_migrations));
  }
  if (status_interval_ms < 0) {
    return Invalid("--status_interval_ms", absl::StrCat("must be >= 0, got ", status_interval_ms));
  }
  // The worker's idle heartbeat is 500 ms and it never sends faster than the interval asked for.
  if (!(worker_liveness_timeout_s >= 1.0) ||
      worker_liveness_timeout_s * 1000 <= std::max(500, status_interval_ms)) {
    return Invalid("--worker_liveness_timeout_s",
                   absl::StrCat("must be >= 1 and longer than --status_interval_ms, got ",
                                worker_liveness_timeout_s));
  }
  if (!(stream_progress_timeout_s >= 1.0)) {
    return Invalid("--stream_progress_timeout_s",
                   absl::StrCat("must be >= 1, got ", stream_progress_timeout_s));
  }
  KVSERVE_RETURN_IF_ERROR(CheckPair("--tls_cert", tls_cert, "--tls_key", tls_key));
  if (!tls_ca.empty() && tls_cert.empty()) return Invalid("--tls_ca", "requires --tls_cert");
  if (absl::Status s =
          CheckPair("--worker_tls_cert", worker_tls_cert, "--worker_tls_key", worker_tls_key);
      !s.ok()) {
    return s;
  }
  if (!worker_tls_cert.empty() && worker_tls_ca.empty()) {
    return Invalid("--worker_tls_cert", "requires --worker_tls_ca");
  }
  if (core.block_size <= 0 || (core.block_size & (core.block_size - 1)) != 0) {
    return Invalid("--block_size", absl::StrCat("must be a power of two, got ", core.block_size));
  }
  if (core.admission.max_waiting_requests < 0) {
    return Invalid("--max_queue",
                   absl::StrCat("must be >= 0, got ", core.admission.max_waiting_requests));
  }
  // The weights' rule (RoutingWeights::Validate), named as the flag that sets one.
  const absl::Status status = core.Validate();
  if (absl::StartsWith(status.message(), "transfer_token_cost:")) {
    return absl::Status(status.code(), absl::StrCat("--", status.message()));
  }
  return status;
}

absl::StatusOr<RouterTlsMaterial> LoadRouterTls(const RouterServerOptions& options) {
  RouterTlsMaterial tls;
  const struct {
    absl::string_view flag;
    const std::string& path;
    std::string* out;
  } files[] = {
      {"--tls_cert", options.tls_cert, &tls.cert_chain_pem},
      {"--tls_key", options.tls_key, &tls.private_key_pem},
      {"--tls_ca", options.tls_ca, &tls.client_ca_pem},
      {"--worker_tls_ca", options.worker_tls_ca, &tls.worker_ca_pem},
      {"--worker_tls_cert", options.worker_tls_cert, &tls.worker_cert_chain_pem},
      {"--worker_tls_key", options.worker_tls_key, &tls.worker_private_key_pem},
  };
  for (const auto& file : files) {
    if (file.path.empty()) continue;
    KVSERVE_ASSIGN_OR_RETURN(std::string contents, ReadFlagFile(file.flag, file.path));
    *file.out = std::move(contents);
  }
  return tls;
}

}  // namespace kvserve
