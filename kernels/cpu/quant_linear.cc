// QuantLinear: activation quantization, the choice of kernel by instruction set, and the split of
// output rows over the thread pool (see quant_linear.h).
#include "kernels/cpu/quant_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace kvserve::kernels::cpu {
namespace {

// Output rows per thread-pool item: a call's rows in about kItemsPerThread items per thread,
// each a contiguous run of at least kMinRowsPerItem rows (a whole number of packed tiles). Long
// runs keep each thread's reads one stream for the prefetchers, and a few items per thread still
// let a thread that is running take over the share of one that is not: batch-1 decode
// (kvserve-generate, 2 threads, medians of 6 alternated runs) went 246 -> 313 tok/s from 64-row
// items, and 131 -> 137 beside a busy process.
constexpr int kItemsPerThread = 4;
constexpr int32_t kMinRowsPerItem = 64;
static_assert(kMinRowsPerItem % kPackRows == 0, "an item starts at a packed tile");

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

QuantPackedFn PackedKernelFor(DType w_dtype, CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return QuantPackedAvx512(w_dtype);
    case CpuIsa::kAvx2:
      return QuantPackedAvx2(w_dtype);
    case CpuIsa::kScalar:
      break;
  }
  return QuantPackedScalar(w_dtype);
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

void QuantLinear(const LinearParams* p, int count, ThreadPool* pool, CpuIsa isa) {
  constexpr int kMaxProducts = 4;
  if (count > kMaxProducts) {  // more than a layer's q, k, v: in groups
    QuantLinear(p, kMaxProducts, pool, isa);
    QuantLinear(p + kMaxProducts, count - kMaxProducts, pool, isa);
    return;
  }
  // Buffers grown once to the largest call, then reused: no allocation in steady state. They are
  // the calling thread's: the pool threads use them (through the pointers taken here; a
  // thread_local named in the loop body would be the pool thread's own) while it waits.
  thread_local std::vector<ActBlock> activations;
  thread_local std::vector<ActPair> pairs;
  thread_local std::vector<float> sums;
  thread_local std::vector<WeightPair> scratch_pairs;
  thread_local std::vector<float> scratch_offsets;
  const auto grow = [](auto& buffer, size_t size) {
    if (buffer.size() < size) buffer.resize(size);
  };
  const int32_t num_tokens = p[0].num_tokens;
  const int32_t num_blocks = p[0].in_features / kActBlock;
  const int32_t num_pairs = (num_blocks + 1) / 2;
  const int32_t sums_stride = (num_blocks + 15) / 16 * 16;
  grow(activations, static_cast<size_t>(num_tokens) * num_blocks);
  switch (isa) {
    case CpuIsa::kAvx512:
      QuantizeActivationsAvx512(p[0].x, num_tokens, p[0].in_features, activations.data());
      break;
    case CpuIsa::kAvx2:
      QuantizeActivationsAvx2(p[0].x, num_tokens, p[0].in_features, activations.data());
      break;
    case CpuIsa::kScalar:
      QuantizeActivations(p[0].x, num_tokens, p[0].in_features, activations.data());
      break;
  }

  // Per product: the tiled kernel where there is one for its type (the activations are then
  // packed in pairs, once), else the row kernel; and where its items start in the shared loop.
  QuantTileFn tiles[kMaxProducts] = {};
  QuantRowsFn rows[kMaxProducts] = {};
  QuantPackedFn packed_fns[kMaxProducts] = {};
  int64_t first_item[kMaxProducts + 1] = {0};
  bool any_tile = false;
  const int num_threads = pool != nullptr ? pool->num_threads() : 1;
  int64_t total_rows = 0;
  for (int i = 0; i < count; ++i) total_rows += p[i].out_features;
  const auto rows_per_item = static_cast<int32_t>(std::max<int64_t>(
      kMinRowsPerItem,
      (total_rows / (kItemsPerThread * num_threads) + kPackRows - 1) / kPackRows * kPackRows));
  for (int i = 0; i < count; ++i) {
    if (p[i].w_packed) {
      packed_fns[i] = PackedKernelFor(p[i].w_dtype, isa);
    } else {
      tiles[i] = isa == CpuIsa::kAvx512 ? QuantTileAvx512(p[i].w_dtype) : nullptr;
      rows[i] = tiles[i] == nullptr ? KernelFor(p[i].w_dtype, isa) : nullptr;
      any_tile = any_tile || tiles[i] != nullptr;
    }
    first_item[i + 1] = first_item[i] + (p[i].out_features + rows_per_item - 1) / rows_per_item;
  }
  if (any_tile) {
    grow(pairs, static_cast<size_t>(num_tokens) * num_pairs);
    grow(sums, static_cast<size_t>(num_tokens) * sums_stride);
    grow(scratch_pairs, static_cast<size_t>(num_threads) * kQuantTileRows * num_pairs);
    grow(scratch_offsets, static_cast<size_t>(num_threads) * kQuantTileRows * sums_stride);
    PackActivationPairs(activations.data(), num_tokens, num_blocks, pairs.data(), sums.data(),
                        sums_stride);
  }
  const ActBlock* const blocks = activations.data();
  const ActPair* const packed = pairs.data();
  const float* const block_sums = sums.data();
  WeightPair* const all_pairs = scratch_pairs.data();
  float* const all_offsets = scratch_offsets.data();

  const auto body = [&](int64_t item, int thread_index) {
    int i = 0;
    while (item >= first_item[i + 1]) ++i;
    const LinearParams& product = p[i];
    const auto begin = static_cast<int32_t>((item - first_item[i]) * rows_per_item);
    const int32_t end = std::min<int32_t>(begin + rows_per_item, product.out_features);
    const auto* w = static_cast<const uint8_t*>(product.w);
    const int64_t row_bytes = RowBytes(product.w_dtype, product.in_features);
    if (packed_fns[i] != nullptr) {
      const QuantRowsArgs args{w,          row_bytes, num_blocks,          blocks,
                               num_tokens, product.y, product.out_features};
      packed_fns[i](args, begin, end);
    } else if (tiles[i] != nullptr) {
      const QuantTileArgs args{w,      row_bytes,  num_blocks, num_pairs, sums_stride,
                               packed, block_sums, num_tokens, product.y, product.out_features};
      tiles[i](args, begin, end,
               {all_pairs + int64_t{thread_index} * kQuantTileRows * num_pairs,
                all_offsets + int64_t{thread_index} * kQuantTileRows * sums_stride});
    } else {
      const QuantRowsArgs args{w,          row_bytes, num_blocks,          blocks,
                               num_tokens, product.y, product.out_features};
      rows[i](args, begin, end);
    }
  };
  if (pool == nullptr) {
    for (int64_t item = 0; item < first_item[count]; ++item) body(item, 0);
  } else {
    pool->ParallelFor(first_item[count], body);
  }
}

}  // namespace kvserve::kernels::cpu
