// Kernels that move rows between fp32 and a storage type T (float, __nv_bfloat16, __half):
// embedding lookup (T -> fp32), KV cache write (fp32 -> T) and the narrowing of Linear's
// activations (fp32 -> T, the type of the weights). Templated on T; instantiated only by
// dispatch.cu.
#ifndef KVSERVE_KERNELS_CUDA_TYPED_ROWS_CUH_
#define KVSERVE_KERNELS_CUDA_TYPED_ROWS_CUH_

#include "kernels/cuda/common.cuh"
#include "kernels/kernels.h"

namespace kvserve::kernels::cuda {

// out[t, :] = table[ids[t], :] widened. One block per token.
template <typename T>
__global__ void EmbeddingKernel(EmbeddingParams p) {
  const int64_t t = blockIdx.x;
  const T* src = static_cast<const T*>(p.table) + static_cast<int64_t>(p.ids[t]) * p.hidden;
  float* dst = p.out + t * p.hidden;  // [hidden]
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) dst[i] = ToFloat(src[i]);
}

// cache[slot of t] = k[t], v[t] rounded to T; tokens with slot -1 are skipped. One block per
// token. k_stride / v_stride: floats between tokens.
template <typename T>
__global__ void WriteKvKernel(KvWriteParams p, int64_t k_stride, int64_t v_stride) {
  const int64_t t = blockIdx.x;
  const int32_t slot = p.slot_mapping[t];
  if (slot < 0) return;  // padding
  const PagedKvView& c = p.cache;
  const int64_t block = slot / c.block_size;
  const int32_t offset = slot % c.block_size;
  T* k_cache = static_cast<T*>(c.k);
  T* v_cache = static_cast<T*>(c.v);
  for (int idx = threadIdx.x; idx < c.num_kv_heads * c.head_dim; idx += blockDim.x) {
    const int h = idx / c.head_dim;
    const int d = idx % c.head_dim;
    const int64_t dst = KvRowOffset(c, block, h, offset) + d;
    k_cache[dst] = FromFloat<T>(p.k[t * k_stride + idx]);
    v_cache[dst] = FromFloat<T>(p.v[t * v_stride + idx]);
  }
}

// dst[i] = src[i] rounded to T, i < n. Grid-stride.
template <typename T>
__global__ void NarrowKernel(const float* src /* [n] */, T* dst /* [n] */, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = FromFloat<T>(src[i]);
  }
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_TYPED_ROWS_CUH_
