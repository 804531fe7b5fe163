// QuantLinear: activation quantization, the choice of kernel by instruction set, and the split of
// output rows over the thread pool (see quant_linear.h).
#include "kernels/cpu/quant_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace kvserve::kernels::cpu {
namespace {

// Output rows per thread-pool item: 64 rows of Q4_1 at in = 1536 are 60 KB of weights, an
// lm_head of 49152 rows makes 768 items (enough to balance two to a few dozen threads).
constexpr int32_t kRowsPerItem = 64;

QuantRowsFn KernelFor(DType w_dtype, CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return QuantRowsAvx512(w_dtype);
    case CpuIsa::kAvx2:
      return QuantRowsAvx2(w_dtype);
    case CpuIsa::kScalar:
      break;
  }
  return QuantRowsScalar(w_dtype);
}

// The tiled kernel's call: activations packed in pairs, each pool thread decoding its row tiles
// into its own scratch. Buffers are grown once to the largest call (no allocation in steady
// state); the pool's threads use them while this (the calling) thread waits in ParallelFor.
void TiledLinear(const LinearParams& p, ThreadPool* pool, const ActBlock* activations,
                 QuantTileFn tile) {
  const int32_t num_blocks = p.in_features / kActBlock;
  const int32_t num_pairs = (num_blocks + 1) / 2;
  const int32_t sums_stride = (num_blocks + 15) / 16 * 16;
  const int num_threads = pool != nullptr ? pool->num_threads() : 1;
  thread_local std::vector<ActPair> pairs;
  thread_local std::vector<float> sums;
  thread_local std::vector<WeightPair> scratch_pairs;
  thread_local std::vector<float> scratch_offsets;
  const auto grow = [](auto& buffer, size_t size) {
    if (buffer.size() < size) buffer.resize(size);
  };
  grow(pairs, static_cast<size_t>(p.num_tokens) * num_pairs);
  grow(sums, static_cast<size_t>(p.num_tokens) * sums_stride);
  grow(scratch_pairs, static_cast<size_t>(num_threads) * 4 * num_pairs);
  grow(scratch_offsets, static_cast<size_t>(num_threads) * 4 * sums_stride);
  PackActivationPairs(activations, p.num_tokens, num_blocks, pairs.data(), sums.data(),
                      sums_stride);
  const QuantTileArgs args{static_cast<const uint8_t*>(p.w),
                           RowBytes(p.w_dtype, p.in_features),
                           num_blocks,
                           num_pairs,
                           sums_stride,
                           pairs.data(),
                           sums.data(),
                           p.num_tokens,
                           p.y,
                           p.out_features};
  const int64_t num_items = (p.out_features + kRowsPerItem - 1) / kRowsPerItem;
  // The calling thread's buffers (a thread_local named in the lambda would be the pool thread's).
  WeightPair* const all_pairs = scratch_pairs.data();
  float* const all_offsets = scratch_offsets.data();
  const auto body = [&](int64_t item, int thread_index) {
    const QuantTileScratch scratch{all_pairs + int64_t{thread_index} * 4 * num_pairs,
                                   all_offsets + int64_t{thread_index} * 4 * sums_stride};
    const int64_t begin = item * kRowsPerItem;
    const int64_t end = std::min<int64_t>(begin + kRowsPerItem, p.out_features);
    tile(args, static_cast<int32_t>(begin), static_cast<int32_t>(end), scratch);
  };
  if (pool == nullptr) {
    for (int64_t item = 0; item < num_items; ++item) body(item, 0);
  } else {
    pool->ParallelFor(num_items, body);
  }
}

}  // namespace

void QuantizeActivations(const float* x, int32_t num_tokens, int32_t in_features, ActBlock* out) {
  const int64_t num_blocks = static_cast<int64_t>(num_tokens) * (in_features / kActBlock);
  for (int64_t b = 0; b < num_blocks; ++b) {
    const float* values = x + b * kActBlock;  // [32]
    float amax = 0.0f;
    for (int i = 0; i < kActBlock; ++i) amax = std::max(amax, std::fabs(values[i]));
    const float d = amax / 127.0f;
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < kActBlock; ++i) {
      const int32_t q = static_cast<int32_t>(std::nearbyint(values[i] * inverse));
      out[b].q[i] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}

void PackActivationPairs(const ActBlock* blocks, int32_t num_tokens, int32_t num_blocks,
                         ActPair* pairs, float* sums, int32_t sums_stride) {
  const int32_t num_pairs = (num_blocks + 1) / 2;
  for (int32_t t = 0; t < num_tokens; ++t) {
    const ActBlock* row = blocks + static_cast<int64_t>(t) * num_blocks;  // [num_blocks]
    for (int32_t p = 0; p < num_pairs; ++p) {
      ActPair& out = pairs[static_cast<int64_t>(t) * num_pairs + p];
      for (int half = 0; half < 2; ++half) {
        const int32_t b = 2 * p + half;
        const bool real = b < num_blocks;
        for (int i = 0; i < kActBlock; ++i) out.q[half * kActBlock + i] = real ? row[b].q[i] : 0;
        for (int i = 0; i < 8; ++i) out.d[half * 8 + i] = real ? row[b].d : 0.0f;
      }
    }
    float* s = sums + static_cast<int64_t>(t) * sums_stride;  // [sums_stride]
    for (int32_t b = 0; b < sums_stride; ++b) s[b] = b < num_blocks ? row[b].s : 0.0f;
  }
}

void QuantLinear(const LinearParams& p, ThreadPool* pool, CpuIsa isa) {
  // Grown once to the largest call, then reused: no allocation in steady state. Read by the pool
  // threads while this (the calling) thread waits in ParallelFor.
  thread_local std::vector<ActBlock> activations;
  const int32_t num_blocks = p.in_features / kActBlock;
  const size_t needed = static_cast<size_t>(p.num_tokens) * num_blocks;
  if (activations.size() < needed) activations.resize(needed);
  switch (isa) {
    case CpuIsa::kAvx512:
      QuantizeActivationsAvx512(p.x, p.num_tokens, p.in_features, activations.data());
      break;
    case CpuIsa::kAvx2:
      QuantizeActivationsAvx2(p.x, p.num_tokens, p.in_features, activations.data());
      break;
    case CpuIsa::kScalar:
      QuantizeActivations(p.x, p.num_tokens, p.in_features, activations.data());
      break;
  }

  if (const QuantTileFn tile = isa == CpuIsa::kAvx512 ? QuantTileAvx512(p.w_dtype) : nullptr;
      tile != nullptr) {
    TiledLinear(p, pool, activations.data(), tile);
    return;
  }
  const QuantRowsArgs args{static_cast<const uint8_t*>(p.w),
                           RowBytes(p.w_dtype, p.in_features),
                           num_blocks,
                           activations.data(),
                           p.num_tokens,
                           p.y,
                           p.out_features};
  const QuantRowsFn rows = KernelFor(p.w_dtype, isa);
  ParallelForRanges(pool, p.out_features, kRowsPerItem, [&](int64_t begin, int64_t end) {
    rows(args, static_cast<int32_t>(begin), static_cast<int32_t>(end));
  });
}

}  // namespace kvserve::kernels::cpu
