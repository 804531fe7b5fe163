#include "router/router_options.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kvcache/kv_layout.h"

namespace kvserve {
namespace {

absl::Status CheckWeight(const char* name, double value) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": must be finite and >= 0, got ", value));
  }
  return absl::OkStatus();
}

constexpr RoutingPolicy kPolicies[] = {RoutingPolicy::kKvAware, RoutingPolicy::kRoundRobin,
                                       RoutingPolicy::kLeastLoaded, RoutingPolicy::kRandom};

}  // namespace

std::string_view RoutingPolicyName(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kKvAware:
      return "kv_aware";
    case RoutingPolicy::kRoundRobin:
      return "round_robin";
    case RoutingPolicy::kLeastLoaded:
      return "least_loaded";
    case RoutingPolicy::kRandom:
      return "random";
  }
  return "unknown";
}

absl::StatusOr<RoutingPolicy> ParseRoutingPolicy(std::string_view name) {
  std::string names;
  for (RoutingPolicy policy : kPolicies) {
    if (RoutingPolicyName(policy) == name) return policy;
    if (!names.empty()) names += ", ";
    names += RoutingPolicyName(policy);
  }
  return absl::InvalidArgumentError("must be one of " + names + ", got '" + std::string(name) +
                                    "'");
}

absl::Status RoutingWeights::Validate() const {
  KVSERVE_RETURN_IF_ERROR(CheckWeight("prefill_token_cost", prefill_token_cost));
  KVSERVE_RETURN_IF_ERROR(CheckWeight("host_hit_token_cost", host_hit_token_cost));
  KVSERVE_RETURN_IF_ERROR(CheckWeight("pool_usage_cost", pool_usage_cost));
  KVSERVE_RETURN_IF_ERROR(CheckWeight("waiting_request_cost", waiting_request_cost));
  KVSERVE_RETURN_IF_ERROR(CheckWeight("running_request_cost", running_request_cost));
  KVSERVE_RETURN_IF_ERROR(CheckWeight("transfer_token_cost", transfer_token_cost));
  if (min_transfer_blocks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_transfer_blocks: must be >= 1, got ", min_transfer_blocks));
  }
  return absl::OkStatus();
}

absl::Status AdmissionOptions::Validate() const {
  if (max_waiting_requests < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_waiting_requests: must be >= 0, got ", max_waiting_requests));
  }
  return absl::OkStatus();
}

absl::Status RouterCoreOptions::Validate() const {
  // The same rule the workers' KV cache applies, so that every worker's block size is accepted.
  KVSERVE_RETURN_IF_ERROR(ValidateBlockSize(block_size));
  if (reports_to_cover_reservation < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reports_to_cover_reservation: must be >= 1, got ", reports_to_cover_reservation));
  }
  KVSERVE_RETURN_IF_ERROR(weights.Validate());
  return admission.Validate();
}

}  // namespace kvserve
