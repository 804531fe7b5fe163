// The one place where engine values and kvserve.v1 protos are converted, both directions:
//   request side:  SamplingParams (validated, with its unset-means-default rules) ->
//   SamplingOptions output side:   EngineOutput -> GenerateResponse, StatusUpdate -> WorkerStatus
//   parts.
// Defaults follow sampling.proto: temperature 1, top_p 1, repetition penalty 1, n 1, max_tokens
// from the limits, a random seed when none was given.
//
// Thread-safety: pure functions (ResolveSampling draws a random seed when needed).
#ifndef KVSERVE_WORKER_PROTO_CONVERSION_H_
#define KVSERVE_WORKER_PROTO_CONVERSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "api/request_validation.h"
#include "engine/engine_output.h"
#include "engine/engine_stats.h"
#include "engine/request.h"
#include "engine/status_subscription.h"
#include "grammar/constraint.h"
#include "kvcache/kv_events.h"
#include "kvserve/v1/output.pb.h"
#include "kvserve/v1/sampling.pb.h"
#include "kvserve/v1/worker.pb.h"
#include "proto/kv_events_conversion.h"

namespace kvserve {

// REQUIRES: ValidateSamplingParams(sampling, limits, ...).ok()
SamplingOptions ResolveSampling(const kvserve::v1::SamplingParams& sampling,
                                const ServingLimits& limits);
// SamplingParams.n with 0 read as 1.
int32_t ResolveN(const kvserve::v1::SamplingParams& sampling);
// SamplingParams.structured_output as grammar/'s Constraint; kind kNone when unset.
Constraint ConstraintOf(const kvserve::v1::SamplingParams& sampling);

kvserve::v1::FinishReason ToProto(FinishReason reason);

// One stream message; `request_id` is the client-visible id.
void ToProto(const EngineOutput& output, const std::string& request_id,
             kvserve::v1::GenerateResponse* response);

// The capacity part of a WorkerStatus.
void ToProto(const EngineStats& stats, kvserve::v1::Capacity* capacity);

}  // namespace kvserve

#endif  // KVSERVE_WORKER_PROTO_CONVERSION_H_
