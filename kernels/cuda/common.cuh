// Device helpers shared by the CUDA kernels: reductions, index math, and the conversions between
// fp32 and the storage types (float, __nv_bfloat16, __half stand for DType kF32, kBF16, kF16).
// Header-only, included by .cu files only.
#ifndef KVSERVE_KERNELS_CUDA_COMMON_CUH_
#define KVSERVE_KERNELS_CUDA_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

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

// ---------------------------------------------------------------------------------------------
// Storage types. Narrowing rounds to nearest even, as FloatToBFloat16 / FloatToHalf in
// kernels/dtype.h do on the host, so both backends store the same bits for finite values.

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// dst[i] = src[i] widened, i < N, with one vector load when N values take 4, 8 or 16 bytes.
// REQUIRES: src aligned to N * sizeof(T) bytes in that case.
template <typename T, int N>
__device__ __forceinline__ void LoadWidened(const T* src, float (&dst)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(T));
  if constexpr (kBytes == 16 || kBytes == 8 || kBytes == 4) {
    using Chunk =
        std::conditional_t<kBytes == 16, uint4, std::conditional_t<kBytes == 8, uint2, uint32_t>>;
    const Chunk raw = *reinterpret_cast<const Chunk*>(src);
    T values[N];
    memcpy(values, &raw, kBytes);
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = ToFloat(values[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = ToFloat(src[i]);
  }
}

// 16 bytes from global memory where pred holds, else zeros: one predicated load, no branch, so
// the compiler keeps all such loads of an unrolled loop in flight together. kStreaming: the
// evict-first hint, for data read once (weights); otherwise the read-only (non-coherent) path.
// REQUIRES: ptr 16-byte aligned where pred holds; it is not read otherwise.
template <bool kStreaming>
__device__ __forceinline__ uint4 LoadGlobal16If(const void* ptr, bool pred) {
  uint4 v;
  if constexpr (kStreaming) {
    asm("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
        "mov.u32 %0, 0;\n\tmov.u32 %1, 0;\n\tmov.u32 %2, 0;\n\tmov.u32 %3, 0;\n\t"
        "@p ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(ptr), "r"(static_cast<int>(pred)));
  } else {
    asm("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
        "mov.u32 %0, 0;\n\tmov.u32 %1, 0;\n\tmov.u32 %2, 0;\n\tmov.u32 %3, 0;\n\t"
        "@p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(ptr), "r"(static_cast<int>(pred)));
  }
  return v;
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_COMMON_CUH_
