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

void QuantLinear(const LinearParams& p, ThreadPool* pool, CpuIsa isa) {
  // Grown once to the largest call, then reused: no allocation in steady state. Read by the pool
  // threads while this (the calling) thread waits in ParallelFor.
  thread_local std::vector<ActBlock> activations;
  const int32_t num_blocks = p.in_features / kActBlock;
  const size_t needed = static_cast<size_t>(p.num_tokens) * num_blocks;
  if (activations.size() < needed) activations.resize(needed);
  QuantizeActivations(p.x, p.num_tokens, p.in_features, activations.data());

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
