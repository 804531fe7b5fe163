// Device helpers shared by the CUDA kernels: reductions and index math. Header-only, included
// by .cu files only.
#ifndef KVSERVE_KERNELS_CUDA_COMMON_CUH_
#define KVSERVE_KERNELS_CUDA_COMMON_CUH_

#include <cuda_runtime.h>

#include <cstdint>

namespace kvserve::kernels::cuda {

constexpr int kWarpSize = 32;

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Sum over the whole block; every thread gets the result. shared holds one float per warp.
// REQUIRES: blockDim.x a multiple of 32, at most 1024; every thread of the block calls it.
__device__ __forceinline__ float BlockSum(float v, float* shared /* [32] */) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  v = WarpSum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < num_warps ? shared[lane] : 0.0f;
  return WarpSum(v);
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_COMMON_CUH_
