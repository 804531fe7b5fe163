// Prefill attention over the paged cache, templated on the head size and the KV cache storage
// type T; instantiated only by dispatch.cu. See paged_attention.cuh for how a mixed batch is
// split between this kernel and the decode kernel.
//
// PagedPrefillKernel<kHeadDim, T>: one block of kPrefillThreads threads per (sequence, tile of
// query tokens, head group). The block holds kPrefillRows rows, a row being one (query token,
// head) pair: tile_tokens = kPrefillRows / heads_per_block consecutive query tokens of the
// sequence times heads_per_block query heads sharing one KV head, so every K/V row brought in
// serves all of them. Keys stream through shared memory kPrefillKeys at a time (read through
// the block table, widened to fp32) up to the tile's last position; per key tile:
//   1. S = Q K^T (Q pre-scaled; each thread a 4 x 4 register tile of rows x keys), causal mask
//      (key position <= the row's position), to shared memory;
//   2. per row, two threads find the tile max, turn scores into exp(s - max), and update the
//      running max / sum and the factor that rescales the row's accumulator;
//   3. O = O * factor + P V (each thread 4 rows x kHeadDim / 8 dimensions in registers).
// The arithmetic is fp32 on CUDA cores, the same order of operations for every T.
// Shared memory exceeds the 48 KiB static limit for kHeadDim 128, so it is dynamic;
// PrefillSharedBytes() gives the size and dispatch.cu raises each instantiation's limit once.
#ifndef KVSERVE_KERNELS_CUDA_PREFILL_ATTENTION_CUH_
#define KVSERVE_KERNELS_CUDA_PREFILL_ATTENTION_CUH_

#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/paged_attention.cuh"

namespace kvserve::kernels::cuda {

constexpr int kPrefillRows = 64;
constexpr int kPrefillKeys = 32;
constexpr int kPrefillThreads = 128;
// The thread layout below is written for these sizes.
static_assert(kPrefillThreads == 128 && kPrefillRows == 64 && kPrefillKeys == 32);
static_assert(kPrefillRows >= kMaxHeadsPerBlock);

// Bytes of dynamic shared memory of PagedPrefillKernel<head_dim, *>.
constexpr size_t PrefillSharedBytes(int head_dim) {
  return sizeof(float) * (static_cast<size_t>(kPrefillRows) * (head_dim + 1)        // q
                          + static_cast<size_t>(kPrefillKeys) * (head_dim + 1)      // k
                          + static_cast<size_t>(kPrefillKeys) * head_dim            // v
                          + static_cast<size_t>(kPrefillRows) * (kPrefillKeys + 1)  // scores
                          + 3 * static_cast<size_t>(kPrefillRows));  // max, sum, factor
}

template <int kHeadDim, typename T>
__global__ void __launch_bounds__(kPrefillThreads) PagedPrefillKernel(AttentionLaunch a) {
  static_assert(kHeadDim % 8 == 0 && (kHeadDim * sizeof(T)) % 16 == 0);
  constexpr int kQStride = kHeadDim + 1;  // +1: rows of one column fall in different banks
  constexpr int kKStride = kHeadDim + 1;
  constexpr int kSStride = kPrefillKeys + 1;
  constexpr int kDimsPerThread = kHeadDim / 8;
  constexpr int kChunk = 16 / sizeof(T);  // values per 16-byte load
  constexpr int kChunksPerRow = kHeadDim / kChunk;
  extern __shared__ float shared[];
  float* q_s = shared;                             // [kPrefillRows, kQStride]
  float* k_s = q_s + kPrefillRows * kQStride;      // [kPrefillKeys, kKStride]
  float* v_s = k_s + kPrefillKeys * kKStride;      // [kPrefillKeys, kHeadDim]
  float* s_s = v_s + kPrefillKeys * kHeadDim;      // [kPrefillRows, kSStride]
  float* row_max = s_s + kPrefillRows * kSStride;  // [kPrefillRows]
  float* row_sum = row_max + kPrefillRows;         // [kPrefillRows]
  float* row_factor = row_sum + kPrefillRows;      // [kPrefillRows]

  const PagedAttentionParams& p = a.p;
  const PagedKvView& c = p.cache;
  const int s = blockIdx.x;
  const int num_query = p.query_start[s + 1] - p.query_start[s];
  const int tile_begin = blockIdx.y * a.tile_tokens;  // first query of the tile, in [0, n)
  if (num_query < kPrefillMinQueries || tile_begin >= num_query) return;  // block-uniform
  const int tile_valid = min(a.tile_tokens, num_query - tile_begin);
  const int first_token = p.query_start[s] + tile_begin;
  const int first_pos = p.context_lens[s] - num_query + tile_begin;
  const int num_keys = first_pos + tile_valid;  // the tile's last token sees keys [0, num_keys)
  const int hpb = a.heads_per_block;
  const int first_head = blockIdx.z * hpb;
  const int kv_head = first_head / a.group;
  const int valid_rows = tile_valid * hpb;  // row r: token r / hpb of the tile, head r % hpb

  const int tid = threadIdx.x;
  for (int idx = tid; idx < kPrefillRows * kHeadDim; idx += kPrefillThreads) {
    const int r = idx / kHeadDim, d = idx % kHeadDim;
    q_s[r * kQStride + d] = r < valid_rows
                                ? p.q[(first_token + r / hpb) * a.q_stride +
                                      static_cast<int64_t>(first_head + r % hpb) * kHeadDim + d] *
                                      p.scale
                                : 0.0f;
  }
  if (tid < kPrefillRows) {
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }

  // Thread layout of steps 1 and 3: rows 4 * row_group + i (i < 4); keys key_group + 8 * j
  // (j < 4) in step 1, dimensions key_group + 8 * j (j < kDimsPerThread) in step 3.
  const int row_group = tid / 8;
  const int key_group = tid % 8;
  float acc[4][kDimsPerThread];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int j = 0; j < kDimsPerThread; ++j) acc[i][j] = 0.0f;
  }

  const T* k_cache = static_cast<const T*>(c.k);
  const T* v_cache = static_cast<const T*>(c.v);
  const int32_t* block_table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  for (int key_base = 0; key_base < num_keys; key_base += kPrefillKeys) {
    // K and V of keys [key_base, key_base + kPrefillKeys), zeros past num_keys (a masked key
    // gets weight 0, and 0 * 0 keeps stale values from turning into NaN).
    for (int chunk = tid; chunk < kPrefillKeys * kChunksPerRow; chunk += kPrefillThreads) {
      const int key_local = chunk / kChunksPerRow;
      const int d0 = (chunk % kChunksPerRow) * kChunk;
      const int key = key_base + key_local;
      float k_vals[kChunk], v_vals[kChunk];
      if (key < num_keys) {
        const int64_t block = block_table[key / c.block_size];
        const int64_t row = KvRowOffset(c, block, kv_head, key % c.block_size);
        LoadWidened<T, kChunk>(k_cache + row + d0, k_vals);
        LoadWidened<T, kChunk>(v_cache + row + d0, v_vals);
      } else {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) k_vals[i] = v_vals[i] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        k_s[key_local * kKStride + d0 + i] = k_vals[i];
        v_s[key_local * kHeadDim + d0 + i] = v_vals[i];
      }
    }
    __syncthreads();  // also publishes q_s and the row state on the first pass

    // 1. Scores of this thread's 4 x 4 (row, key) tile, masked.
    float score[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) score[i][j] = 0.0f;
    }
    for (int d = 0; d < kHeadDim; ++d) {
      float qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = q_s[(row_group * 4 + i) * kQStride + d];
#pragma unroll
      for (int j = 0; j < 4; ++j) kv[j] = k_s[(key_group + 8 * j) * kKStride + d];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) score[i][j] += qv[i] * kv[j];
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = row_group * 4 + i;
      const int row_pos = r < valid_rows ? first_pos + r / hpb : -1;  // -1: masks every key
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int key_local = key_group + 8 * j;
        s_s[r * kSStride + key_local] = key_base + key_local <= row_pos ? score[i][j] : -INFINITY;
      }
    }
    __syncthreads();

    // 2. Online softmax: threads 2r and 2r + 1 (one warp) share row r, 16 keys each.
    {
      const int r = tid / 2;
      const int half = tid % 2;
      float* row_scores = s_s + r * kSStride + half * (kPrefillKeys / 2);
      float tile_max = -INFINITY;
#pragma unroll
      for (int k = 0; k < kPrefillKeys / 2; ++k) tile_max = fmaxf(tile_max, row_scores[k]);
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float old_max = row_max[r];  // read by both threads before thread 2r writes it
      const float new_max = fmaxf(old_max, tile_max);
      // A row that has seen only masked keys keeps max -inf; 0 as the reference keeps the
      // exponentials at exp(-inf) = 0 instead of NaN.
      const float reference = new_max == -INFINITY ? 0.0f : new_max;
      float tile_sum = 0.0f;
#pragma unroll
      for (int k = 0; k < kPrefillKeys / 2; ++k) {
        const float weight = expf(row_scores[k] - reference);
        row_scores[k] = weight;
        tile_sum += weight;
      }
      tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
      if (half == 0) {
        const float factor = expf(old_max - reference);  // 0 while old_max is -inf
        row_factor[r] = factor;
        row_sum[r] = row_sum[r] * factor + tile_sum;
        row_max[r] = new_max;
      }
    }
    __syncthreads();

    // 3. Rescale this thread's accumulators and add P V.
    float factor[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) factor[i] = row_factor[row_group * 4 + i];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < kDimsPerThread; ++j) acc[i][j] *= factor[i];
    }
    for (int k = 0; k < kPrefillKeys; ++k) {
      float weight[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) weight[i] = s_s[(row_group * 4 + i) * kSStride + k];
#pragma unroll
      for (int j = 0; j < kDimsPerThread; ++j) {
        const float v = v_s[k * kHeadDim + key_group + 8 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[i][j] += weight[i] * v;
      }
    }
    __syncthreads();  // before the next tile overwrites k_s, v_s, s_s and row_factor
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = row_group * 4 + i;
    if (r >= valid_rows) continue;
    const float sum = row_sum[r];
    const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* out = p.out + ((static_cast<int64_t>(first_token) + r / hpb) * p.num_heads + first_head +
                          r % hpb) *
                             kHeadDim;
#pragma unroll
    for (int j = 0; j < kDimsPerThread; ++j) out[key_group + 8 * j] = acc[i][j] * inv_sum;
  }
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_PREFILL_ATTENTION_CUH_
