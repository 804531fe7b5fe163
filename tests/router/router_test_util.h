// Builders of WorkerStatus messages for the router's tests: capacities, snapshot parts and event
// batches, written by hand or converted from a real KvCacheManager's snapshot and events.
//
// Thread-safety: plain functions.

#ifndef KVSERVE_TESTS_ROUTER_ROUTER_TEST_UTIL_H_
#define KVSERVE_TESTS_ROUTER_ROUTER_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "kvcache/block_hash.h"
#include "kvcache/kv_events.h"
#include "kvcache/types.h"
#include "kvserve/v1/worker.pb.h"

namespace kvserve::testing_util {

struct CapacitySpec {
  int64_t total = 100;
  int64_t free = 100;
  int64_t evictable = 0;
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t block_size = 16;
  int64_t host_blocks = 0;  // the host KV tier's size (0: none)
};

// A status with `epoch` and the capacity (used = total - free).
kvserve::v1::WorkerStatus MakeStatus(uint64_t epoch, const CapacitySpec& capacity);

// Sets the status's snapshot part.
void SetSnapshotPart(kvserve::v1::WorkerStatus* status, uint64_t sequence, int32_t part_index,
                     bool last_part, const std::vector<BlockHash>& hashes);

// Appends a batch with one stored event (when `stored` is not empty) then one removed event
// (when `removed` is not empty).
void AddBatch(kvserve::v1::WorkerStatus* status, uint64_t sequence,
              const std::vector<BlockHash>& stored, const std::vector<BlockHash>& removed = {});
// Appends a batch holding a single all-cleared event.
void AddClearBatch(kvserve::v1::WorkerStatus* status, uint64_t sequence);

// Converts a KvCacheManager's drained batch (kvcache/kv_events.h) and appends it, event kinds in
// order, as the worker does.
void AddBatch(kvserve::v1::WorkerStatus* status, const KvEventBatch& batch, int32_t block_size);

// Distinct fake hashes for index tests: {i + 1, salt}.
BlockHash FakeHash(uint64_t i, uint64_t salt = 0);
std::vector<BlockHash> FakeChain(int n, uint64_t salt = 0);

// Tokens first, first + 1, ...
std::vector<TokenId> Range(int n, TokenId first = 0);

}  // namespace kvserve::testing_util

#endif  // KVSERVE_TESTS_ROUTER_ROUTER_TEST_UTIL_H_
