// QuantLinear: the choice of kernel by instruction set and the split of output rows into pool
// items (PlanItems), activation quantization (QuantizeInput), and the items themselves (RunItem);
// see quant_linear.h.
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

void QuantizeActivationsWith(CpuIsa isa, const float* x /* [num_tokens, in_features] */,
                             int32_t num_tokens, int32_t in_features,
                             ActBlock* out /* [num_tokens, in_features / 32] */) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return QuantizeActivationsAvx512(x, num_tokens, in_features, out);
    case CpuIsa::kAvx2:
      return QuantizeActivationsAvx2(x, num_tokens, in_features, out);
    case CpuIsa::kScalar:
      return QuantizeActivations(x, num_tokens, in_features, out);
  }
}

constexpr int kMaxProducts = 4;  // products of one loop; QuantLinear splits larger calls

// The kernel of each product and its share of the loop: product i is items
// [first_item[i], first_item[i + 1]), each rows_per_item output rows (its last one fewer). A
// product's kernel is the one of tile, rows and packed that is set.
struct ItemPlan {
  QuantTileFn tile[kMaxProducts] = {};      // the tiled kernel, where its type has one (AVX-512)
  QuantRowsFn rows[kMaxProducts] = {};      // else the row kernel
  QuantPackedFn packed[kMaxProducts] = {};  // a packed weight's (LinearParams::w_packed)
  int64_t first_item[kMaxProducts + 1] = {0};
  int32_t rows_per_item = 0;
  bool any_tile = false;  // the activations must be packed in pairs (QuantizeInput)
};

// Chooses the kernels of p[0 .. count) and splits their rows into items for num_threads threads.
// REQUIRES: count <= kMaxProducts.
ItemPlan PlanItems(const LinearParams* p, int count, int num_threads, CpuIsa isa) {
  ItemPlan plan;
  int64_t total_rows = 0;
  for (int i = 0; i < count; ++i) total_rows += p[i].out_features;
  plan.rows_per_item = static_cast<int32_t>(std::max<int64_t>(
      kMinRowsPerItem,
      (total_rows / (kItemsPerThread * num_threads) + kPackRows - 1) / kPackRows * kPackRows));
  for (int i = 0; i < count; ++i) {
    if (p[i].w_packed) {
      plan.packed[i] = PackedKernelFor(p[i].w_dtype, isa);
    } else {
      plan.tile[i] = isa == CpuIsa::kAvx512 ? QuantTileAvx512(p[i].w_dtype) : nullptr;
      plan.rows[i] = plan.tile[i] == nullptr ? KernelFor(p[i].w_dtype, isa) : nullptr;
      plan.any_tile = plan.any_tile || plan.tile[i] != nullptr;
    }
    plan.first_item[i + 1] =
        plan.first_item[i] + (p[i].out_features + plan.rows_per_item - 1) / plan.rows_per_item;
  }
  return plan;
}

// The activations of a call as the kernels read them, and the tiled kernel's scratch, in buffers
// of the calling thread (QuantizeInput).
struct QuantizedInput {
  const ActBlock* blocks;     // [num_tokens, num_blocks]
  const ActPair* pairs;       // [num_tokens, num_pairs]; only with a tiled kernel
  const float* sums;          // [num_tokens, sums_stride]; only with a tiled kernel
  WeightPair* scratch_pairs;  // [num_threads, kQuantTileRows, num_pairs]; only with a tiled kernel
  float* scratch_offsets;     // [num_threads, kQuantTileRows, sums_stride]; the same
  int32_t num_tokens;
  int32_t num_blocks;
  int32_t num_pairs;
  int32_t sums_stride;
};

// Quantizes p.x (the input of every product of a call) with the kernel of isa; with_pairs: packs
// it in pairs too and sizes the tiled kernel's scratch for num_threads threads.
QuantizedInput QuantizeInput(const LinearParams& p, bool with_pairs, int num_threads, CpuIsa isa) {
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
  QuantizedInput in{};
  in.num_tokens = p.num_tokens;
  in.num_blocks = p.in_features / kActBlock;
  in.num_pairs = (in.num_blocks + 1) / 2;
  in.sums_stride = (in.num_blocks + 15) / 16 * 16;
  grow(activations, static_cast<size_t>(in.num_tokens) * in.num_blocks);
  QuantizeActivationsWith(isa, p.x, in.num_tokens, p.in_features, activations.data());
  if (with_pairs) {
    grow(pairs, static_cast<size_t>(in.num_tokens) * in.num_pairs);
    grow(sums, static_cast<size_t>(in.num_tokens) * in.sums_stride);
    grow(scratch_pairs, static_cast<size_t>(num_threads) * kQuantTileRows * in.num_pairs);
    grow(scratch_offsets, static_cast<size_t>(num_threads) * kQuantTileRows * in.sums_stride);
    PackActivationPairs(activations.data(), in.num_tokens, in.num_blocks, pairs.data(), sums.data(),
                        in.sums_stride);
  }
  in.blocks = activations.data();
  in.pairs = pairs.data();
  in.sums = sums.data();
  in.scratch_pairs = scratch_pairs.data();
  in.scratch_offsets = scratch_offsets.data();
  return in;
}

// Computes pool item `item` of plan: a run of output rows of one product, on thread thread_index
// (whose share of the tile scratch it uses).
void RunItem(const LinearParams* p, const ItemPlan& plan, const QuantizedInput& in, int64_t item,
             int thread_index) {
  int i = 0;
  while (item >= plan.first_item[i + 1]) ++i;
  const LinearParams& product = p[i];
  const auto begin = static_cast<int32_t>((item - plan.first_item[i]) * plan.rows_per_item);
  const int32_t end = std::min<int32_t>(begin + plan.rows_per_item, product.out_features);
  const auto* w = static_cast<const uint8_t*>(product.w);
  const int64_t row_bytes = RowBytes(product.w_dtype, product.in_features);
  if (plan.tile[i] != nullptr) {
    const QuantTileArgs args{
        w,        row_bytes, in.num_blocks, in.num_pairs, in.sums_stride,
        in.pairs, in.sums,   in.num_tokens, product.y,    product.out_features};
    plan.tile[i](args, begin, end,
                 {in.scratch_pairs + int64_t{thread_index} * kQuantTileRows * in.num_pairs,
                  in.scratch_offsets + int64_t{thread_index} * kQuantTileRows * in.sums_stride});
    return;
  }
  const QuantRowsArgs args{w,         row_bytes,           in.num_blocks, in.blocks, in.num_tokens,
                           product.y, product.out_features};
  if (plan.packed[i] != nullptr) {
    plan.packed[i](args, begin, end);
  } else {
    plan.rows[i](args, begin, end);
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

void QuantLinear(const LinearParams* p, int count, ThreadPool* pool, CpuIsa isa) {
  if (count > kMaxProducts) {  // more than a layer's q, k, v: in groups
    QuantLinear(p, kMaxProducts, pool, isa);
    QuantLinear(p + kMaxProducts, count - kMaxProducts, pool, isa);
    return;
  }
  const int num_threads = pool != nullptr ? pool->num_threads() : 1;
  const ItemPlan plan = PlanItems(p, count, num_threads, isa);
  const QuantizedInput input = QuantizeInput(p[0], plan.any_tile, num_threads, isa);
  const auto body = [&](int64_t item, int thread_index) {
    RunItem(p, plan, input, item, thread_index);
  };
  const int64_t num_items = plan.first_item[count];
  if (pool == nullptr) {
    for (int64_t item = 0; item < num_items; ++item) body(item, 0);
  } else {
    pool->ParallelFor(num_items, body);
  }
}

}  // namespace kvserve::kernels::cpu
