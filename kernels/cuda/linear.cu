// CudaBackend::Linear: y = x w^T (+ bias) through cuBLAS.
//  - f32 weights: SGEMM in fp32 (default math mode: no TF32), close to the CPU backend.
//  - bf16 / f16 weights: x is rounded to the weight type into the ReserveLinear()d scratch, then
//    cublasGemmEx on tensor cores with CUBLAS_COMPUTE_32F and an fp32 y.
// Both run in the column-major view cuBLAS uses: Y^T [out, T] = W [out, in] (row-major W is
// column-major W^T, so op T) times X^T [in, T] (row-major X is column-major X^T, op N).
// cuBLAS uses the workspace bound in BindCublas, so it allocates nothing here and the calls can
// be captured in a graph.
#include <cublas_v2.h>

#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void AddBiasKernel(float* y /* [T, out] */, const float* bias /* [out] */,
                              int out_features) {
  float* row = y + static_cast<int64_t>(blockIdx.x) * out_features;
  for (int o = threadIdx.x; o < out_features; o += blockDim.x) row[o] += bias[o];
}

}  // namespace

void CudaBackend::Linear(const LinearParams& p) {
  if (p.num_tokens == 0 || p.out_features == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  switch (p.w_dtype) {
    case DType::kF32:
      status = cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, p.out_features, p.num_tokens,
                           p.in_features, &alpha, static_cast<const float*>(p.w), p.in_features,
                           p.x, p.in_features, &beta, p.y, p.out_features);
      break;
    case DType::kBF16:
    case DType::kF16: {
      const int64_t n = static_cast<int64_t>(p.num_tokens) * p.in_features;
      if (static_cast<size_t>(n) * 2 > linear_scratch_bytes_) {
        Fail(std::string("Linear: ") + std::to_string(p.num_tokens) + " x " +
             std::to_string(p.in_features) +
             " activations exceed the scratch; call Backend::ReserveLinear with larger limits");
        return;
      }
      if (!NarrowActivations(p.x, p.w_dtype, n, linear_scratch_)) return;
      const cudaDataType_t type = p.w_dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
      status = cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, p.out_features, p.num_tokens,
                            p.in_features, &alpha, p.w, type, p.in_features, linear_scratch_, type,
                            p.in_features, &beta, p.y, CUDA_R_32F, p.out_features,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      break;
    }
    default:
      Fail(std::string("Linear: weight type ") + DTypeName(p.w_dtype) +
           " is not supported by the CUDA backend (f32, bf16, f16)");
      return;
  }
  if (status != CUBLAS_STATUS_SUCCESS) {
    Fail(std::string("Linear (") + DTypeName(p.w_dtype) + "): cuBLAS " +
         cublasGetStatusName(status));
    return;
  }
  if (p.bias != nullptr) {
    AddBiasKernel<<<p.num_tokens, kThreads, 0, stream_>>>(p.y, p.bias, p.out_features);
    Check(cudaGetLastError(), "Linear: bias");
  }
}

}  // namespace kvserve::kernels::cuda
