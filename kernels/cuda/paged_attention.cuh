// Paged attention kernels, templated on the head size and the KV cache storage type T (float,
// __nv_bfloat16 or __half); instantiated only by dispatch.cu.
//
// How a mixed batch is split between the two kernels, without the host reading any device
// metadata: the launcher knows only the scalar fields of PagedAttentionParams. It launches
//  - PagedDecodeKernel over (sequence, head group, KV split): a block whose sequence does not
//    have exactly one query token returns at once;
//  - PagedPrefillKernel (prefill_attention.cuh) over (sequence, query tile, head group), only
//    when max_query_len >= kPrefillMinQueries: a block whose sequence has fewer query tokens,
//    or whose tile starts past them, returns at once.
// So every sequence is served by exactly one kernel, chosen on the device from query_start.
// Empty blocks cost a few microseconds; a graph captured for a decode batch has no prefill
// launch at all.
//
// PagedDecodeKernel<kHeadDim, T, kMaxHeads>: one block of kDecodeWarps warps per (sequence, head
// group, KV split). A head group is up to kMaxHeads query heads sharing one KV head (GQA), so
// every K/V row read from the cache serves all of them. The loads are 16 bytes a lane: a K or V
// row is read by kLanesPerKey lanes (kHeadDim / kVec of them hold dimensions), so one warp load
// brings kKeysPerLoad rows. A warp takes the split's keys in steps of kStepKeys consecutive
// positions (every kDecodeWarps-th step): it issues all of a step's K and V loads, then
//   1. scores: per head a kVec-wide dot product per lane, summed over the row's lanes;
//   2. one online-softmax update per head and step: the step's max, one rescale of the running
//      sum and accumulator, 2^(s - max) per key (q is pre-scaled by scale * log2(e));
//   3. acc += p V.
// Each group of a row's lanes is its own stream of keys with its own (max, sum, acc); the
// kDecodeWarps * kKeysPerLoad streams are merged in shared memory. With one split the block
// writes the output; with several it writes its (max, sum, acc) to the workspace and
// MergeSplitsKernel combines the splits of each (sequence, head).
// The keys of a split are computed on the device from the sequence's own context length
// (ceil(context / num_splits), at least kMinSplitLen, rounded up to whole steps), so the result
// is right for any context even when num_splits was planned (or captured in a graph) for
// another max_context_len.
#ifndef KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_
#define KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/kernels.h"

namespace kvserve::kernels::cuda {

constexpr int kDecodeWarps = 4;
constexpr int kMaxHeadsPerBlock = 8;
// A split covers at least this many keys: shorter splits cost more in merging than they win.
constexpr int kMinSplitLen = 128;
constexpr int kMaxSplits = 64;
// log2(e): the decode kernel works in powers of 2 (exp2f is one instruction).
constexpr float kLog2e = 1.44269504088896341f;
// Sequences with at least this many query tokens go to the prefill kernel, the others (one
// token) to the decode kernel.
constexpr int kPrefillMinQueries = 2;

// Launch arguments beyond the params, planned on the host per call.
struct AttentionLaunch {
  PagedAttentionParams p;
  int64_t q_stride;         // floats between tokens of q
  int32_t group;            // query heads per KV head
  int32_t heads_per_block;  // divides group, <= kMaxHeadsPerBlock
  int32_t num_splits;       // decode kernel: KV splits per sequence
  int32_t tile_tokens;      // prefill kernel: query tokens per block
  float* split_acc;         // [num_seqs, num_heads, num_splits, head_dim] when num_splits > 1
  float* split_max;         // [num_seqs, num_heads, num_splits]
  float* split_sum;         // [num_seqs, num_heads, num_splits]
};

// How PagedDecodeKernel<kHeadDim, T, kMaxHeads> lays out a warp over K/V rows.
template <int kHeadDim, typename T, int kMaxHeads>
struct DecodeLayout {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // values per 16-byte load
  static constexpr int kLanesUsed = kHeadDim / kVec;             // lanes holding a row's values
  static constexpr int kLanesPerKey = kLanesUsed <= 8 ? 8 : kLanesUsed <= 16 ? 16 : 32;
  static constexpr int kKeysPerLoad = kWarpSize / kLanesPerKey;
  // Loads in flight per lane: fewer with 8 heads, whose state takes the registers.
  static constexpr int kUnroll = kMaxHeads >= 8 || kKeysPerLoad >= 4 ? 4 : 8;
  static constexpr int kStepKeys = kUnroll * kKeysPerLoad;
  static constexpr int kStreams = kDecodeWarps * kKeysPerLoad;
  static_assert(kHeadDim % kVec == 0 && kLanesUsed <= kWarpSize);
};

// The keys of one split of a context: [begin, end), begin a multiple of step_keys.
struct SplitRange {
  int begin, end;
};
__device__ __forceinline__ SplitRange SplitKeys(int context, int num_splits, int split,
                                                int step_keys) {
  int len = max(kMinSplitLen, (context + num_splits - 1) / num_splits);
  len = (len + step_keys - 1) / step_keys * step_keys;
  const int begin = split * len;
  return {begin, min(context, begin + len)};
}

// dst[i] = the kVec values of T packed in raw, widened.
template <typename T, int kVec>
__device__ __forceinline__ void Unpack(const uint4& raw, float (&dst)[kVec]) {
  T values[kVec];
  memcpy(values, &raw, sizeof(raw));
#pragma unroll
  for (int i = 0; i < kVec; ++i) dst[i] = ToFloat(values[i]);
}

// Sum over the kLanes lanes of an aligned lane group; every lane of the group gets it.
template <int kLanes>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

template <int kHeadDim, typename T, int kMaxHeads>
__global__ void __launch_bounds__(kDecodeWarps* kWarpSize) PagedDecodeKernel(AttentionLaunch a) {
  using L = DecodeLayout<kHeadDim, T, kMaxHeads>;
  constexpr int kVec = L::kVec;
  constexpr int kUnroll = L::kUnroll;
  __shared__ float max_shared[L::kStreams][kMaxHeads];
  __shared__ float sum_shared[L::kStreams][kMaxHeads];
  __shared__ float acc_shared[L::kStreams][kMaxHeads][kHeadDim];

  const PagedAttentionParams& p = a.p;
  const PagedKvView& c = p.cache;
  const int s = blockIdx.x;
  if (p.query_start[s + 1] - p.query_start[s] != 1) return;  // not a decode: prefill kernel's
  const int t = p.query_start[s];
  const int heads = a.heads_per_block;  // <= kMaxHeads
  const int first_head = blockIdx.y * heads;
  const int kv_head = first_head / a.group;
  // The query sits at position context - 1.
  const SplitRange keys = SplitKeys(p.context_lens[s], a.num_splits, blockIdx.z, L::kStepKeys);

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int sub = lane / L::kLanesPerKey;  // which row of a load
  const int part = lane % L::kLanesPerKey;
  const bool has_dims = part < L::kLanesUsed;
  const int d0 = part * kVec;  // this lane's dimensions: [d0, d0 + kVec)
  float q[kMaxHeads][kVec], acc[kMaxHeads][kVec], m[kMaxHeads], l[kMaxHeads];
#pragma unroll
  for (int h = 0; h < kMaxHeads; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.0f;
    const float* q_head = p.q + t * a.q_stride + static_cast<int64_t>(first_head + h) * kHeadDim;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      acc[h][i] = 0.0f;
      q[h][i] = h < heads && has_dims ? q_head[d0 + i] * (p.scale * kLog2e) : 0.0f;
    }
  }

  const T* k_cache = static_cast<const T*>(c.k);
  const T* v_cache = static_cast<const T*>(c.v);
  const int32_t* block_table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  // Steps start at multiples of kStepKeys, so with such block sizes a step is in one block.
  const bool step_in_one_block = c.block_size % L::kStepKeys == 0;
  for (int step = keys.begin + warp * L::kStepKeys; step < keys.end;
       step += kDecodeWarps * L::kStepKeys) {
    int64_t step_row = 0;
    if (step_in_one_block) {
      step_row = KvRowOffset(c, block_table[step / c.block_size], kv_head, step % c.block_size);
    }
    uint4 k_raw[kUnroll], v_raw[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = step + u * L::kKeysPerLoad + sub;
      const bool load = key < keys.end && has_dims;
      int64_t row = step_row + static_cast<int64_t>(key - step) * kHeadDim;
      if (!step_in_one_block && load) {
        row = KvRowOffset(c, block_table[key / c.block_size], kv_head, key % c.block_size);
      }
      k_raw[u] = LoadGlobal16If<false>(k_cache + row + d0, load);
      v_raw[u] = LoadGlobal16If<false>(v_cache + row + d0, load);
    }

    // 1. Scores (in log2 units). Guards on heads are block-uniform, so shuffles stay converged.
    float score[kUnroll][kMaxHeads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float k_row[kVec];
      Unpack<T, kVec>(k_raw[u], k_row);
#pragma unroll
      for (int h = 0; h < kMaxHeads; ++h) {
        if (h >= heads) continue;
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < kVec; ++i) partial = fmaf(q[h][i], k_row[i], partial);
        score[u][h] = GroupSum<L::kLanesPerKey>(partial);
      }
    }
    // 2. One softmax update per head for the step; score becomes the weight 2^(s - max).
#pragma unroll
    for (int h = 0; h < kMaxHeads; ++h) {
      if (h >= heads) continue;
      float step_max = -FLT_MAX;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (step + u * L::kKeysPerLoad + sub < keys.end) step_max = fmaxf(step_max, score[u][h]);
      }
      const float new_max = fmaxf(m[h], step_max);
      const float correction = exp2f(m[h] - new_max);  // 0 while m is -FLT_MAX
      float weights = 0.0f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool valid = step + u * L::kKeysPerLoad + sub < keys.end;
        score[u][h] = valid ? exp2f(score[u][h] - new_max) : 0.0f;
        weights += score[u][h];
      }
      l[h] = l[h] * correction + weights;
      m[h] = new_max;
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc[h][i] *= correction;
    }
    // 3. acc += p V.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float v_row[kVec];
      Unpack<T, kVec>(v_raw[u], v_row);
#pragma unroll
      for (int h = 0; h < kMaxHeads; ++h) {
        if (h >= heads) continue;
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[h][i] = fmaf(score[u][h], v_row[i], acc[h][i]);
      }
    }
  }

  // Merge the streams: each one's state to shared memory, then one thread per (head, dim).
  const int stream = warp * L::kKeysPerLoad + sub;
#pragma unroll
  for (int h = 0; h < kMaxHeads; ++h) {
    if (h >= heads) continue;
    if (part == 0) {
      max_shared[stream][h] = m[h];
      sum_shared[stream][h] = l[h];
    }
    if (has_dims) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) acc_shared[stream][h][d0 + i] = acc[h][i];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < heads * kHeadDim; idx += blockDim.x) {
    const int h = idx / kHeadDim, d = idx % kHeadDim;
    float block_max = -FLT_MAX;
    for (int w = 0; w < L::kStreams; ++w) block_max = fmaxf(block_max, max_shared[w][h]);
    float sum = 0.0f, value = 0.0f;
    for (int w = 0; w < L::kStreams; ++w) {
      // A stream that saw no key has l = 0 and acc = 0, so its factor does not matter.
      const float factor = exp2f(max_shared[w][h] - block_max);
      sum += sum_shared[w][h] * factor;
      value += acc_shared[w][h][d] * factor;
    }
    const int head = first_head + h;
    if (a.num_splits == 1) {
      p.out[(static_cast<int64_t>(t) * p.num_heads + head) * kHeadDim + d] =
          sum > 0.0f ? value / sum : 0.0f;
    } else {
      const int64_t at = (static_cast<int64_t>(s) * p.num_heads + head) * a.num_splits + blockIdx.z;
      a.split_acc[at * kHeadDim + d] = value;
      if (d == 0) {
        a.split_max[at] = block_max;  // -FLT_MAX with sum 0 for a split past the context
        a.split_sum[at] = sum;
      }
    }
  }
}

// out[t, h] = merge of the num_splits partial states of (s, h), t the one query token of
// decode sequence s. One block per (sequence, head); other sequences' blocks return at once.
template <int kHeadDim>
__global__ void MergeSplitsKernel(AttentionLaunch a) {
  const PagedAttentionParams& p = a.p;
  const int s = blockIdx.x;
  if (p.query_start[s + 1] - p.query_start[s] != 1) return;
  const int t = p.query_start[s];
  const int head = blockIdx.y;
  const int64_t first = (static_cast<int64_t>(s) * p.num_heads + head) * a.num_splits;
  float global_max = -FLT_MAX;
  for (int i = 0; i < a.num_splits; ++i) global_max = fmaxf(global_max, a.split_max[first + i]);
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) {
    float sum = 0.0f, value = 0.0f;
    for (int i = 0; i < a.num_splits; ++i) {
      const float factor = exp2f(a.split_max[first + i] - global_max);  // log2 units
      sum += a.split_sum[first + i] * factor;
      value += a.split_acc[(first + i) * kHeadDim + d] * factor;
    }
    p.out[(static_cast<int64_t>(t) * p.num_heads + head) * kHeadDim + d] =
        sum > 0.0f ? value / sum : 0.0f;
  }
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_
