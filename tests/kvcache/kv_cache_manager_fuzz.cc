// libFuzzer target: arbitrary bytes become a pool shape and a sequence of KvCacheManager
// operations, each followed by the harness's invariant checks (kv_cache_harness.h). A violated
// invariant prints its description and aborts.
//
// Input format: byte 0 picks num_blocks (2..32), byte 1 the block size (1..32: byte 1 % 6) and
// the host tier's size (0..16 blocks: byte 1 / 6 % 17); then each operation is one kind byte
// followed by up to 8 entropy bytes.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tests/kvcache/kv_cache_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int num_blocks = 2 + data[0] % 31;
  const int block_size = 1 << (data[1] % 6);
  const int num_host_blocks = data[1] / 6 % 17;
  kvserve::KvCacheHarness harness(num_blocks, block_size, num_host_blocks);
  constexpr int kMaxOperations = 4000;
  size_t offset = 2;
  for (int op = 0; op < kMaxOperations && offset < size; ++op) {
    const int kind = data[offset++];
    uint64_t entropy = 0;
    const size_t take = size - offset < sizeof(entropy) ? size - offset : sizeof(entropy);
    std::memcpy(&entropy, data + offset, take);
    offset += take;
    if (absl::Status status = harness.Apply(kind, entropy); !status.ok()) {
      std::fprintf(stderr, "invariant violated after operation %d (pool %d x %d, host %d): %s\n",
                   op, num_blocks, block_size, num_host_blocks, status.ToString().c_str());
      std::abort();
    }
  }
  return 0;
}
