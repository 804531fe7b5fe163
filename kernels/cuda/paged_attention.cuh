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
// PagedDecodeKernel<kHeadDim, T>: one block of kAttentionWarps warps per (sequence, head group,
// KV split). A head group is up to kMaxHeadsPerBlock query heads sharing one KV head (GQA), so
// each K/V row read from the cache serves all of them. Warp w takes keys in runs of
// kDecodeUnroll (loaded together, so several rows are in flight); for each key the 32 lanes
// hold kHeadDim / 32 consecutive dimensions each (one vector load), a warp reduction gives the
// score, and every head keeps an online softmax (running max m, running sum l, unnormalised
// accumulator). The warps' states are merged in shared memory. With one split the block writes
// the output; with several it writes its (m, l, acc) to the workspace and MergeSplitsKernel
// combines the splits of each (sequence, head).
// The keys of a split are computed on the device from the sequence's own context length
// (ceil(context / num_splits), at least kMinSplitLen), so the result is right for any context
// even when num_splits was planned (or captured in a graph) for another max_context_len.
#ifndef KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_
#define KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/kernels.h"

namespace kvserve::kernels::cuda {

constexpr int kAttentionWarps = 4;
constexpr int kMaxHeadsPerBlock = 8;
constexpr int kDecodeUnroll = 4;
// A split covers at least this many keys: shorter splits cost more in merging than they win.
constexpr int kMinSplitLen = 256;
constexpr int kMaxSplits = 64;
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

// Keys of one lane: dimensions [lane * kPerLane, lane * kPerLane + kPerLane) of a row, widened;
// dimensions past kHeadDim read as 0.
template <int kHeadDim, typename T, int kPerLane>
__device__ __forceinline__ void LoadLaneSlice(const T* row /* [kHeadDim] */, int lane,
                                              float (&out)[kPerLane]) {
  const int d0 = lane * kPerLane;
  if constexpr (kHeadDim == kPerLane * kWarpSize) {
    LoadWidened<T, kPerLane>(row + d0, out);  // row starts are kHeadDim-aligned
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) out[i] = d0 + i < kHeadDim ? ToFloat(row[d0 + i]) : 0.0f;
  }
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kAttentionWarps* kWarpSize) PagedDecodeKernel(AttentionLaunch a) {
  constexpr int kPerLane = (kHeadDim + kWarpSize - 1) / kWarpSize;
  __shared__ float max_shared[kAttentionWarps][kMaxHeadsPerBlock];
  __shared__ float sum_shared[kAttentionWarps][kMaxHeadsPerBlock];
  __shared__ float acc_shared[kAttentionWarps][kMaxHeadsPerBlock][kHeadDim];

  const PagedAttentionParams& p = a.p;
  const PagedKvView& c = p.cache;
  const int s = blockIdx.x;
  if (p.query_start[s + 1] - p.query_start[s] != 1) return;  // not a decode: prefill kernel's
  const int t = p.query_start[s];
  const int first_head = blockIdx.y * a.heads_per_block;
  const int kv_head = first_head / a.group;
  const int split = blockIdx.z;
  const int context = p.context_lens[s];  // the query sits at position context - 1
  const int split_len = max(kMinSplitLen, (context + a.num_splits - 1) / a.num_splits);
  const int key_begin = split * split_len;
  const int key_end = min(context, key_begin + split_len);

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  float q[kMaxHeadsPerBlock][kPerLane];  // pre-scaled
  float m[kMaxHeadsPerBlock], l[kMaxHeadsPerBlock], acc[kMaxHeadsPerBlock][kPerLane];
#pragma unroll
  for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane * kPerLane + i;
      acc[h][i] = 0.0f;
      q[h][i] =
          h < a.heads_per_block && d < kHeadDim
              ? p.q[t * a.q_stride + static_cast<int64_t>(first_head + h) * kHeadDim + d] * p.scale
              : 0.0f;
    }
  }

  const T* k_cache = static_cast<const T*>(c.k);
  const T* v_cache = static_cast<const T*>(c.v);
  const int32_t* block_table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  for (int base = key_begin + warp * kDecodeUnroll; base < key_end;
       base += kAttentionWarps * kDecodeUnroll) {
    float k_reg[kDecodeUnroll][kPerLane], v_reg[kDecodeUnroll][kPerLane];
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const int key = base + u;
      if (key < key_end) {
        const int64_t block = block_table[key / c.block_size];
        const int64_t row = KvRowOffset(c, block, kv_head, key % c.block_size);
        LoadLaneSlice<kHeadDim, T, kPerLane>(k_cache + row, lane, k_reg[u]);
        LoadLaneSlice<kHeadDim, T, kPerLane>(v_cache + row, lane, v_reg[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      if (base + u >= key_end) continue;  // warp-uniform, so the shuffles below stay converged
#pragma unroll
      for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
        // A guard, not a break, so the loop unrolls fully and m, l, acc stay in registers.
        if (h >= a.heads_per_block) continue;
        float partial = 0.0f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) partial += q[h][i] * k_reg[u][i];
        const float score = WarpSum(partial);
        const float new_max = fmaxf(m[h], score);
        const float correction = expf(m[h] - new_max);
        const float weight = expf(score - new_max);
        l[h] = l[h] * correction + weight;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          acc[h][i] = acc[h][i] * correction + weight * v_reg[u][i];
        }
        m[h] = new_max;
      }
    }
  }

  // Merge the warps: each warp's state to shared memory, then one thread per (head, dim).
#pragma unroll
  for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
    if (h >= a.heads_per_block) continue;
    if (lane == 0) {
      max_shared[warp][h] = m[h];
      sum_shared[warp][h] = l[h];
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane * kPerLane + i;
      if (d < kHeadDim) acc_shared[warp][h][d] = acc[h][i];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < a.heads_per_block * kHeadDim; idx += blockDim.x) {
    const int h = idx / kHeadDim, d = idx % kHeadDim;
    float block_max = -FLT_MAX;
    for (int w = 0; w < kAttentionWarps; ++w) block_max = fmaxf(block_max, max_shared[w][h]);
    float sum = 0.0f, value = 0.0f;
    for (int w = 0; w < kAttentionWarps; ++w) {
      // A warp that saw no key has l = 0 and acc = 0, so its factor does not matter.
      const float factor = expf(max_shared[w][h] - block_max);
      sum += sum_shared[w][h] * factor;
      value += acc_shared[w][h][d] * factor;
    }
    const int head = first_head + h;
    if (a.num_splits == 1) {
      p.out[(static_cast<int64_t>(t) * p.num_heads + head) * kHeadDim + d] =
          sum > 0.0f ? value / sum : 0.0f;
    } else {
      const int64_t at = (static_cast<int64_t>(s) * p.num_heads + head) * a.num_splits + split;
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
      const float factor = expf(a.split_max[first + i] - global_max);
      sum += a.split_sum[first + i] * factor;
      value += a.split_acc[(first + i) * kHeadDim + d] * factor;
    }
    p.out[(static_cast<int64_t>(t) * p.num_heads + head) * kHeadDim + d] =
        sum > 0.0f ? value / sum : 0.0f;
  }
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_
