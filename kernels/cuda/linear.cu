// CudaBackend::Linear and LinearSameInput: y = x w^T (+ bias).
//  - 16-bit weights (bf16, f16), one token, up to kGemvMaxRows output rows: GemvKernel, one
//    launch for all the weights of one x (q, k, v). Decode is here: each weight byte is read
//    once, with 16-byte loads, and the x values are rounded to the weight type in registers.
//  - f32 weights: SGEMM in fp32 (default math mode: no TF32), close to the CPU backend.
//  - 16-bit weights, more tokens: x is rounded to the weight type once per LinearSameInput into
//    the ReserveLinear()d scratch, then cublasGemmEx on tensor cores with CUBLAS_COMPUTE_32F and
//    an fp32 y.
// Every 16-bit path rounds x as NarrowKernel does, so all products are exact and only the fp32
// summation order differs. cuBLAS runs in the column-major view: Y^T [out, T] = W [out, in]
// (row-major W is column-major W^T, so op T) times X^T [in, T] (row-major X is column-major X^T,
// op N). cuBLAS uses the workspace bound in BindCublas, so it allocates nothing here and the
// calls can be captured in a graph.
#include <cublas_v2.h>

#include <cstring>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;
// Where the GEMV beats cuBLAS on the H200 (bench/RESULTS.md, "CUDA decode on the H200"): one
// token, up to 8192 output rows in a launch (q/k/v fused 6144, o_proj 4096: 0.49 of HBM against
// cuBLAS' 0.38-0.56 with its separate rounding kernel per weight; down_proj level). cuBLAS wins at
// 14336+ rows (0.74 against 0.60 for gate/up, 0.92 against 0.67 for lm_head) and at 2-4 tokens
// (the kernel's kTokens 2 and 4 measured 0.33-0.53), so those take it.
constexpr int kGemvMaxTokens = 1;
constexpr int64_t kGemvMaxRows = 8192;
constexpr int kGemvMaxWeights = 3;
constexpr int kGemvWarps = 8;
constexpr int kGemvRows = 4;  // output rows per block
constexpr int kGemvVec = 8;   // 16-bit values per 16-byte load

// The weights of one GemvKernel launch; weight i's output rows are the blocks
// [first_block[i], first_block[i + 1]).
struct GemvLaunch {
  const float* x;  // [num_tokens, in_features]
  int32_t num_tokens;
  int32_t in_features;
  int32_t count;
  const void* w[kGemvMaxWeights];
  const float* bias[kGemvMaxWeights];
  float* y[kGemvMaxWeights];
  int32_t out_features[kGemvMaxWeights];
  int32_t first_block[kGemvMaxWeights + 1];
};

// y[m, row] for kGemvRows rows of one weight per block and up to kTokens tokens (launched with
// 1; see kGemvMaxTokens). A lane reads 16-byte chunks of the rows, a warp 512 contiguous bytes
// of a row per load; the block's warps take interleaved chunks of in_features, each with kUnroll
// chunks of every row in flight before it computes (decode is bound by how many weight bytes
// are on their way). Each lane keeps kGemvRows x kTokens partial sums, reduced over the warp,
// then over the warps in shared memory in a fixed order. Weights are read with the streaming
// hint: each byte once.
template <typename T, int kTokens>
__global__ void __launch_bounds__(kGemvWarps* kWarpSize) GemvKernel(GemvLaunch g) {
  constexpr int kUnroll = kTokens <= 2 ? 4 : 2;
  constexpr int kStride = kGemvWarps * kWarpSize * kGemvVec;  // values between a lane's chunks
  __shared__ float partial[kGemvWarps][kGemvRows][kTokens];
  // Which weight: unrolled selects, so the parameter arrays are indexed by constants.
  const void* w = g.w[0];
  const float* bias = g.bias[0];
  float* y = g.y[0];
  int out = g.out_features[0];
  int first_block = 0;
#pragma unroll
  for (int j = 1; j < kGemvMaxWeights; ++j) {
    if (j < g.count && static_cast<int>(blockIdx.x) >= g.first_block[j]) {
      w = g.w[j];
      bias = g.bias[j];
      y = g.y[j];
      out = g.out_features[j];
      first_block = g.first_block[j];
    }
  }
  const int row0 = (blockIdx.x - first_block) * kGemvRows;
  const int in = g.in_features;
  const int tokens = g.num_tokens;  // <= kTokens
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const T* weight = static_cast<const T*>(w);

  float acc[kGemvRows][kTokens];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
#pragma unroll
    for (int m = 0; m < kTokens; ++m) acc[r][m] = 0.0f;
  }
  for (int base = (warp * kWarpSize + lane) * kGemvVec; base < in; base += kUnroll * kStride) {
    uint4 w_raw[kUnroll][kGemvRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kStride;
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        w_raw[u][r] = LoadGlobal16If<true>(weight + static_cast<int64_t>(row0 + r) * in + i,
                                           i < in && row0 + r < out);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kStride;
      float x_rounded[kTokens][kGemvVec];
#pragma unroll
      for (int m = 0; m < kTokens; ++m) {
        const float* src = g.x + static_cast<int64_t>(m) * in + i;
        const uint4 lo = LoadGlobal16If<false>(src, m < tokens && i < in);
        const uint4 hi = LoadGlobal16If<false>(src + 4, m < tokens && i < in);
        float x_raw[kGemvVec];
        memcpy(x_raw, &lo, sizeof(lo));
        memcpy(x_raw + 4, &hi, sizeof(hi));
#pragma unroll
        for (int k = 0; k < kGemvVec; ++k) x_rounded[m][k] = ToFloat(FromFloat<T>(x_raw[k]));
      }
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) {
        T w_vals[kGemvVec];
        memcpy(w_vals, &w_raw[u][r], sizeof(w_raw[u][r]));
#pragma unroll
        for (int k = 0; k < kGemvVec; ++k) {
          const float wk = ToFloat(w_vals[k]);
#pragma unroll
          for (int m = 0; m < kTokens; ++m) acc[r][m] = fmaf(wk, x_rounded[m][k], acc[r][m]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
#pragma unroll
    for (int m = 0; m < kTokens; ++m) {
      const float sum = WarpSum(acc[r][m]);
      if (lane == 0) partial[warp][r][m] = sum;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kGemvRows * kTokens; idx += blockDim.x) {
    const int r = idx / kTokens, m = idx % kTokens;
    const int row = row0 + r;
    if (row >= out || m >= tokens) continue;
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kGemvWarps; ++v) sum += partial[v][r][m];
    y[static_cast<int64_t>(m) * out + row] = bias != nullptr ? sum + bias[row] : sum;
  }
}

template <typename T, int kTokens>
void LaunchGemv(GemvLaunch& g, cudaStream_t stream) {
  int blocks = 0;
  for (int i = 0; i < g.count; ++i) {
    g.first_block[i] = blocks;
    blocks += CeilDiv(g.out_features[i], kGemvRows);
  }
  g.first_block[g.count] = blocks;
  if (blocks > 0) GemvKernel<T, kTokens><<<blocks, kGemvWarps * kWarpSize, 0, stream>>>(g);
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

__global__ void AddBiasKernel(float* y /* [T, out] */, const float* bias /* [out] */,
                              int out_features) {
  float* row = y + static_cast<int64_t>(blockIdx.x) * out_features;
  for (int o = threadIdx.x; o < out_features; o += blockDim.x) row[o] += bias[o];
}

}  // namespace

bool CudaBackend::SmallBatchLinear(const LinearParams* p, int count) {
  const LinearParams& first = p[0];
  if (count > kGemvMaxWeights || first.num_tokens > kGemvMaxTokens ||
      first.in_features % kGemvVec != 0 || !Aligned16(first.x) ||
      (first.w_dtype != DType::kBF16 && first.w_dtype != DType::kF16)) {
    return false;
  }
  GemvLaunch g{};
  g.x = first.x;
  g.num_tokens = first.num_tokens;
  g.in_features = first.in_features;
  g.count = count;
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) {
    if (p[i].w_dtype != first.w_dtype || p[i].w_packed || !Aligned16(p[i].w)) return false;
    g.w[i] = p[i].w;
    g.bias[i] = p[i].bias;
    g.y[i] = p[i].y;
    g.out_features[i] = p[i].out_features;
    rows += p[i].out_features;
  }
  if (rows > kGemvMaxRows) return false;
  if (first.w_dtype == DType::kBF16) {
    LaunchGemv<__nv_bfloat16, 1>(g, stream_);
  } else {
    LaunchGemv<__half, 1>(g, stream_);
  }
  Check(cudaGetLastError(), "Linear (small batch)");
  return true;
}

void CudaBackend::Linear(const LinearParams& p) { LinearSameInput(&p, 1); }

void CudaBackend::LinearSameInput(const LinearParams* p, int count) {
  if (count <= 0 || p[0].num_tokens == 0) return;
  if (SmallBatchLinear(p, count)) return;
  const float alpha = 1.0f, beta = 0.0f;
  DType narrowed = DType::kF32;  // the type x sits in the scratch as, once rounded
  for (int i = 0; i < count; ++i) {
    const LinearParams& q = p[i];
    if (q.out_features == 0) continue;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    switch (q.w_dtype) {
      case DType::kF32:
        status = cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, q.out_features, q.num_tokens,
                             q.in_features, &alpha, static_cast<const float*>(q.w), q.in_features,
                             q.x, q.in_features, &beta, q.y, q.out_features);
        break;
      case DType::kBF16:
      case DType::kF16: {
        const int64_t n = static_cast<int64_t>(q.num_tokens) * q.in_features;
        if (static_cast<size_t>(n) * 2 > linear_scratch_bytes_) {
          Fail(std::string("Linear: ") + std::to_string(q.num_tokens) + " x " +
               std::to_string(q.in_features) +
               " activations exceed the scratch; call Backend::ReserveLinear with larger limits");
          return;
        }
        if (narrowed != q.w_dtype) {
          if (!NarrowActivations(q.x, q.w_dtype, n, linear_scratch_)) return;
          narrowed = q.w_dtype;
        }
        const cudaDataType_t type = q.w_dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
        status = cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, q.out_features, q.num_tokens,
                              q.in_features, &alpha, q.w, type, q.in_features, linear_scratch_,
                              type, q.in_features, &beta, q.y, CUDA_R_32F, q.out_features,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        break;
      }
      default:
        Fail(std::string("Linear: weight type ") + DTypeName(q.w_dtype) +
             " is not supported by the CUDA backend (f32, bf16, f16)");
        return;
    }
    if (status != CUBLAS_STATUS_SUCCESS) {
      Fail(std::string("Linear (") + DTypeName(q.w_dtype) + "): cuBLAS " +
           cublasGetStatusName(status));
      return;
    }
    if (q.bias != nullptr) {
      AddBiasKernel<<<q.num_tokens, kThreads, 0, stream_>>>(q.y, q.bias, q.out_features);
      Check(cudaGetLastError(), "Linear: bias");
    }
  }
}

}  // namespace kvserve::kernels::cuda
