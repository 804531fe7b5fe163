#include "worker/worker_options.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/flag_file.h"
#include "base/status_macros.h"
#include "kvcache/kv_layout.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"

namespace kvserve {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", message));
}

}  // namespace

absl::Status ValidateHostPort(absl::string_view flag, absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return FlagError(flag, absl::StrCat("must be host:port, got '", address, "'"));
  }
  const absl::string_view host = address.substr(0, colon);
  if (host.front() == '[' && host.back() != ']') {
    return FlagError(flag, absl::StrCat("unterminated IPv6 host in '", address, "'"));
  }
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return FlagError(flag, absl::StrCat("port must be in [0, 65535], got '", address, "'"));
  }
  return absl::OkStatus();
}

absl::Status WorkerOptions::Validate() const {
  if (model.empty()) return FlagError("model", "must name a model file, directory or spec");
  if (!ValidateBlockSize(block_size).ok()) {
    return FlagError("block_size",
                     absl::StrCat("must be a power of two in [1, 256], got ", block_size));
  }
  if (kv_memory_bytes < 0) {
    return FlagError("kv_memory_bytes", absl::StrCat("must be >= 0, got ", kv_memory_bytes));
  }
  if (host_kv_bytes < 0) {
    return FlagError("host_kv_bytes", absl::StrCat("must be >= 0, got ", host_kv_bytes));
  }
  if (max_num_seqs < 1) {
    return FlagError("max_num_seqs", absl::StrCat("must be >= 1, got ", max_num_seqs));
  }
  if (max_num_batched_tokens < 1) {
    return FlagError("max_num_batched_tokens",
                     absl::StrCat("must be >= 1, got ", max_num_batched_tokens));
  }
  if (max_num_batched_tokens < max_num_seqs) {
    return FlagError(
        "max_num_batched_tokens",
        absl::StrCat("must be >= --max_num_seqs (", max_num_seqs,
                     ") so every running sequence can decode, got ", max_num_batched_tokens));
  }
  KVSERVE_RETURN_IF_ERROR(ValidateHostPort("listen", listen));
  KVSERVE_RETURN_IF_ERROR(ValidateHostPort("metrics_listen", metrics_listen));
  if (http_port < -1 || http_port > 65535) {
    return FlagError("http_port",
                     absl::StrCat("must be -1 (off) or in [0, 65535], got ", http_port));
  }
  if (max_waiting_requests < 1) {
    return FlagError("max_waiting_requests",
                     absl::StrCat("must be >= 1, got ", max_waiting_requests));
  }
  if (tls_cert.empty() != tls_key.empty()) {
    return FlagError(tls_cert.empty() ? "tls_cert" : "tls_key",
                     "--tls_cert and --tls_key must be given together");
  }
  if (!tls_ca.empty() && tls_cert.empty()) {
    return FlagError("tls_ca", "needs --tls_cert and --tls_key (mTLS is on top of TLS)");
  }
  if (!std::isfinite(structured_output_timeout_s) || structured_output_timeout_s <= 0) {
    return FlagError(
        "structured_output_timeout_s",
        absl::StrCat("must be a finite number > 0, got ", structured_output_timeout_s));
  }
  if (!std::isfinite(drain_timeout_s) || drain_timeout_s < 0) {
    return FlagError("drain_timeout_s",
                     absl::StrCat("must be a finite number >= 0, got ", drain_timeout_s));
  }
  if (preemption_mode != "recompute" && preemption_mode != "swap") {
    return FlagError("preemption_mode",
                     absl::StrCat("must be recompute or swap, got \"", preemption_mode, "\""));
  }
  if (preemption_mode == "swap" && host_kv_bytes == 0) {
    return FlagError("preemption_mode", "swap keeps blocks in the host tier: set --host_kv_bytes");
  }
  if (!std::isfinite(drain_kv_handoff_s) || drain_kv_handoff_s < 0) {
    return FlagError("drain_kv_handoff_s",
                     absl::StrCat("must be a finite number >= 0, got ", drain_kv_handoff_s));
  }
  if (!std::isfinite(kv_fetch_timeout_s) || kv_fetch_timeout_s < 0) {
    return FlagError("kv_fetch_timeout_s",
                     absl::StrCat("must be a finite number >= 0, got ", kv_fetch_timeout_s));
  }
  if (served_model_name.size() > 256) {
    return FlagError("served_model_name",
                     absl::StrCat("at most 256 characters, got ", served_model_name.size()));
  }
  for (char c : served_model_name) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return FlagError("served_model_name",
                       absl::StrCat("must not contain white space or control characters, got \"",
                                    served_model_name, "\""));
    }
  }
  if (worker_id.size() > 128) {
    return FlagError("worker_id", absl::StrCat("at most 128 characters, got ", worker_id.size()));
  }
  if (!chat_template.empty()) KVSERVE_RETURN_IF_ERROR(ReadChatTemplateFile(chat_template).status());
  return absl::OkStatus();
}

absl::StatusOr<TlsMaterial> LoadTlsFiles(const WorkerOptions& options) {
  TlsMaterial material;
  KVSERVE_ASSIGN_OR_RETURN(std::string cert, ReadFlagFile("--tls_cert", options.tls_cert));
  material.cert_chain_pem = std::move(cert);
  KVSERVE_ASSIGN_OR_RETURN(std::string key, ReadFlagFile("--tls_key", options.tls_key));
  material.private_key_pem = std::move(key);
  if (!options.tls_ca.empty()) {
    KVSERVE_ASSIGN_OR_RETURN(std::string ca, ReadFlagFile("--tls_ca", options.tls_ca));
    material.client_ca_pem = std::move(ca);
  }
  return material;
}

absl::StatusOr<StepTimeModel> ParseStepTimeModel(absl::string_view json_text) {
  const nlohmann::json json = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError("--step_time_model: not a JSON object");
  }
  StepTimeModel model;
  const std::pair<const char*, double*> fields[] = {
      {"fixed_ms", &model.fixed_ms},
      {"prefill_token_ms", &model.prefill_token_ms},
      {"decode_token_ms", &model.decode_token_ms},
      {"prefill_attention_ms_per_mtoken", &model.prefill_attention_ms_per_mtoken},
      {"decode_attention_ms_per_mtoken", &model.decode_attention_ms_per_mtoken}};
  for (const auto& [name, value] : fields) {
    auto it = json.find(name);
    if (it == json.end()) continue;
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--step_time_model: ", name, ": must be a number >= 0"));
    }
    *value = it->get<double>();
  }
  if (model.empty()) {
    return absl::InvalidArgumentError("--step_time_model: every field is 0 or absent");
  }
  return model;
}

}  // namespace kvserve
