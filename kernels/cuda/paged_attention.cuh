// Paged attention kernels, templated on the head size; instantiated only by dispatch.cu.
//
// PagedAttentionKernel<kHeadDim>: one block of kWarps warps per (query token, head group,
// KV split). A head group is up to kMaxHeadsPerBlock query heads sharing one KV head (GQA), so
// each K/V row read from the cache serves all of them. Warp w takes keys w, w + kWarps, ... of
// the split; for each key the 32 lanes hold kHeadDim / 32 dimensions each, a warp reduction
// gives the score, and every head keeps an online softmax (running max m, running sum l,
// unnormalised accumulator). The warps' states are merged in shared memory. With one split the
// block writes the output; with several it writes its (m, l, acc) to the workspace and
// MergeSplitsKernel combines the splits of each (token, head).
#ifndef KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_
#define KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_

#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/kernels.h"

namespace kvserve::kernels::cuda {

constexpr int kAttentionWarps = 4;
constexpr int kMaxHeadsPerBlock = 8;

// Launch arguments beyond the params, planned on the host per call.
struct AttentionLaunch {
  PagedAttentionParams p;
  int64_t q_stride;         // floats between tokens of q
  int32_t group;            // query heads per KV head
  int32_t heads_per_block;  // divides group, <= kMaxHeadsPerBlock
  int32_t num_splits;
  int32_t split_len;  // keys per split
  float* split_acc;   // [num_tokens, num_heads, num_splits, head_dim] when num_splits > 1
  float* split_max;   // [num_tokens, num_heads, num_splits]
  float* split_sum;   // [num_tokens, num_heads, num_splits]
};

// The sequence owning query token t, or -1 for padding. Binary search over query_start.
__device__ __forceinline__ int FindSequence(const int32_t* query_start /* [S + 1] */, int num_seqs,
                                            int t) {
  if (t >= query_start[num_seqs]) return -1;
  int lo = 0, hi = num_seqs - 1;  // answer: the last s with query_start[s] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

template <int kHeadDim>
__global__ void __launch_bounds__(kAttentionWarps* kWarpSize)
    PagedAttentionKernel(AttentionLaunch a) {
  constexpr int kPerLane = (kHeadDim + kWarpSize - 1) / kWarpSize;
  __shared__ float q_shared[kMaxHeadsPerBlock][kHeadDim];
  __shared__ float max_shared[kAttentionWarps][kMaxHeadsPerBlock];
  __shared__ float sum_shared[kAttentionWarps][kMaxHeadsPerBlock];
  __shared__ float acc_shared[kAttentionWarps][kMaxHeadsPerBlock][kHeadDim];

  const PagedAttentionParams& p = a.p;
  const PagedKvView& c = p.cache;
  const int t = blockIdx.x;
  const int first_head = blockIdx.y * a.heads_per_block;
  const int kv_head = first_head / a.group;
  const int split = blockIdx.z;
  const int s = FindSequence(p.query_start, p.num_seqs, t);
  if (s < 0) return;  // padding token: no output
  const int num_query = p.query_start[s + 1] - p.query_start[s];
  const int pos = p.context_lens[s] - num_query + (t - p.query_start[s]);
  const int key_begin = split * a.split_len;
  const int key_end = min(pos + 1, key_begin + a.split_len);

  for (int idx = threadIdx.x; idx < a.heads_per_block * kHeadDim; idx += blockDim.x) {
    const int h = idx / kHeadDim, d = idx % kHeadDim;
    q_shared[h][d] =
        p.q[t * a.q_stride + static_cast<int64_t>(first_head + h) * kHeadDim + d] * p.scale;
  }
  __syncthreads();

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  float m[kMaxHeadsPerBlock], l[kMaxHeadsPerBlock], acc[kMaxHeadsPerBlock][kPerLane];
#pragma unroll
  for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
    m[h] = -FLT_MAX;
    l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[h][i] = 0.0f;
  }

  const int32_t* block_table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  for (int key = key_begin + warp; key < key_end; key += kAttentionWarps) {
    const int64_t block = block_table[key / c.block_size];
    const int64_t row =
        ((block * c.num_kv_heads + kv_head) * c.block_size + key % c.block_size) * kHeadDim;
    float k_reg[kPerLane], v_reg[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = i * kWarpSize + lane;
      k_reg[i] = d < kHeadDim ? static_cast<const float*>(c.k)[row + d] : 0.0f;
      v_reg[i] = d < kHeadDim ? static_cast<const float*>(c.v)[row + d] : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < kMaxHeadsPerBlock; ++h) {
      // A guard, not a break, so the loop unrolls fully and m, l, acc stay in registers.
      if (h >= a.heads_per_block) continue;
      float partial = 0.0f;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int d = i * kWarpSize + lane;
        if (d < kHeadDim) partial += q_shared[h][d] * k_reg[i];
      }
      const float score = WarpSum(partial);
      const float new_max = fmaxf(m[h], score);
      const float correction = expf(m[h] - new_max);
      const float weight = expf(score - new_max);
      l[h] = l[h] * correction + weight;
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[h][i] = acc[h][i] * correction + weight * v_reg[i];
      m[h] = new_max;
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
      const int d = i * kWarpSize + lane;
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
    const int64_t token_head = static_cast<int64_t>(t) * p.num_heads + head;
    if (a.num_splits == 1) {
      p.out[token_head * kHeadDim + d] = sum > 0.0f ? value / sum : 0.0f;
    } else {
      const int64_t at = token_head * a.num_splits + split;
      a.split_acc[at * kHeadDim + d] = value;
      if (d == 0) {
        a.split_max[at] = block_max;
        a.split_sum[at] = sum;
      }
    }
  }
}

// out[t, h] = merge of the num_splits partial states of (t, h). One block per (token, head).
template <int kHeadDim>
__global__ void MergeSplitsKernel(AttentionLaunch a) {
  const PagedAttentionParams& p = a.p;
  const int t = blockIdx.x;
  if (t >= p.query_start[p.num_seqs]) return;  // padding token
  const int64_t token_head = static_cast<int64_t>(t) * p.num_heads + blockIdx.y;
  const int64_t first = token_head * a.num_splits;
  float global_max = -FLT_MAX;
  for (int s = 0; s < a.num_splits; ++s) global_max = fmaxf(global_max, a.split_max[first + s]);
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) {
    float sum = 0.0f, value = 0.0f;
    for (int s = 0; s < a.num_splits; ++s) {
      const float factor = expf(a.split_max[first + s] - global_max);
      sum += a.split_sum[first + s] * factor;
      value += a.split_acc[(first + s) * kHeadDim + d] * factor;
    }
    p.out[token_head * kHeadDim + d] = sum > 0.0f ? value / sum : 0.0f;
  }
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_PAGED_ATTENTION_CUH_
