// Randomised property test: 10,000 random operation sequences on small pools (so that eviction,
// exhaustion and prefix sharing happen all the time), each operation checked against the
// reference model of kv_cache_harness.h. Prints its seed; KVSERVE_TEST_SEED=<n> reproduces a run.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "tests/kvcache/kv_cache_harness.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

constexpr int kNumSequences = 10000;
constexpr int kBlockSizes[] = {1, 2, 4, 8, 16, 32};

uint64_t TestSeed() {
  if (const char* env = std::getenv("KVSERVE_TEST_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  return std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
}

TEST(KvCachePropertyTest, RandomOperationSequencesKeepEveryInvariant) {
  const uint64_t seed = TestSeed();
  std::printf("KVSERVE_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  HarnessCounters total;
  for (int run = 0; run < kNumSequences; ++run) {
    const int num_blocks = 2 + static_cast<int>(rng() % 24);
    const int block_size = kBlockSizes[rng() % std::size(kBlockSizes)];
    const int num_operations = 20 + static_cast<int>(rng() % 60);
    // Half the runs with a host tier of 1..16 blocks under the pool.
    const int num_host_blocks = rng() % 2 == 0 ? 0 : 1 + static_cast<int>(rng() % 16);
    KvCacheHarness harness(num_blocks, block_size, num_host_blocks);
    for (int op = 0; op < num_operations; ++op) {
      const int kind = static_cast<int>(rng() % KvCacheHarness::kNumOperationKinds);
      const absl::Status status = harness.Apply(kind, rng());
      KVSERVE_ASSERT_OK(status) << "seed " << seed << ", run " << run << " (pool " << num_blocks
                                << " x " << block_size << ", host " << num_host_blocks
                                << "), operation " << op;
    }
    const HarnessCounters& c = harness.counters();
    total.operations += c.operations;
    total.sequences_added += c.sequences_added;
    total.prefix_hit_tokens += c.prefix_hit_tokens;
    total.evictions += c.evictions;
    total.resource_exhausted += c.resource_exhausted;
    total.fork_copies += c.fork_copies;
    total.expected_errors += c.expected_errors;
    total.host_hit_tokens += c.host_hit_tokens;
    total.imported_blocks += c.imported_blocks;
  }
  std::printf(
      "operations=%lld sequences=%lld prefix_hit_tokens=%lld evictions=%lld "
      "resource_exhausted=%lld fork_copies=%lld expected_errors=%lld host_hit_tokens=%lld "
      "imported_blocks=%lld\n",
      static_cast<long long>(total.operations), static_cast<long long>(total.sequences_added),
      static_cast<long long>(total.prefix_hit_tokens), static_cast<long long>(total.evictions),
      static_cast<long long>(total.resource_exhausted), static_cast<long long>(total.fork_copies),
      static_cast<long long>(total.expected_errors), static_cast<long long>(total.host_hit_tokens),
      static_cast<long long>(total.imported_blocks));
  // The runs must actually exercise what they claim to check.
  EXPECT_GT(total.prefix_hit_tokens, 0);
  EXPECT_GT(total.evictions, 0);
  EXPECT_GT(total.resource_exhausted, 0);
  EXPECT_GT(total.fork_copies, 0);
  EXPECT_GT(total.expected_errors, 0);
  EXPECT_GT(total.host_hit_tokens, 0);
  EXPECT_GT(total.imported_blocks, 0);
}

}  // namespace
}  // namespace kvserve
