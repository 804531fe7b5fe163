// Helpers shared by the KvCacheManager unit tests.

#ifndef KVSERVE_TESTS_KVCACHE_KV_CACHE_TEST_UTIL_H_
#define KVSERVE_TESTS_KVCACHE_KV_CACHE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string_view>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "tests/status_matchers.h"

namespace kvserve::testing_util {

// `count` tokens first, first + 1, ...
inline std::vector<TokenId> Range(int count, TokenId first = 0) {
  std::vector<TokenId> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

inline std::vector<TokenId> Concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline std::unique_ptr<KvCacheManager> Make(int num_blocks, int block_size = 4) {
  auto manager = KvCacheManager::Create(
      KvCacheConfig{.num_blocks = num_blocks, .block_size = block_size, .epoch = 7});
  KVSERVE_EXPECT_OK(manager);
  return *std::move(manager);
}

inline std::vector<BlockId> Table(const KvCacheManager& m, SequenceId id) {
  absl::Span<const BlockId> table = *m.GetBlockTable(id);
  return {table.begin(), table.end()};
}

// Adds a sequence, computes its whole prompt and checks the invariants.
inline void AddAndCompute(KvCacheManager& m, SequenceId id, const std::vector<TokenId>& prompt,
                          std::string_view salt = "") {
  absl::StatusOr<SequenceStart> start = m.AddSequence(id, prompt, salt, 1 << 20);
  KVSERVE_ASSERT_OK(start);
  KVSERVE_ASSERT_OK(m.CommitComputed(id, start->num_new_tokens));
  KVSERVE_ASSERT_OK(m.CheckInvariants());
}

inline std::vector<KvEvent> Drain(KvCacheManager& m) {
  KvEventBatch batch;
  m.DrainEvents(&batch);
  return batch.events;
}

}  // namespace kvserve::testing_util

#endif  // KVSERVE_TESTS_KVCACHE_KV_CACHE_TEST_UTIL_H_
