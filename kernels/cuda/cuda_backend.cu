// CudaBackend: creation, error tracking, synchronisation and the cuBLAS linear layer. The
// other launchers live beside their kernels (elementwise.cu, dispatch.cu).
#include <cublas_v2.h>

#include <cstdio>

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

std::unique_ptr<CudaBackend> CudaBackend::Create(cudaStream_t stream, std::string* error) {
  int device = 0;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    *error = std::string("no CUDA device: ") +
             (status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0");
    return nullptr;
  }
  int num_sms = 0;
  if ((status = cudaGetDevice(&device)) != cudaSuccess ||
      (status = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device)) !=
          cudaSuccess) {
    *error = std::string("CUDA device query failed: ") + cudaGetErrorString(status);
    return nullptr;
  }
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(cublas, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
    if (cublas != nullptr) cublasDestroy(cublas);
    *error = "cuBLAS could not be initialised";
    return nullptr;
  }
  return std::unique_ptr<CudaBackend>(new CudaBackend(stream, cublas, num_sms));
}

CudaBackend::~CudaBackend() { cublasDestroy(cublas_); }

void CudaBackend::Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess || !first_error_.empty()) return;
  first_error_ = std::string(what) + ": " + cudaGetErrorString(status);
}

void* CudaBackend::Allocate(size_t bytes) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory is not sticky; clear it
    return nullptr;
  }
  return ptr;
}

void CudaBackend::Free(void* ptr) {
  if (ptr != nullptr) Check(cudaFree(ptr), "Free");
}

void CudaBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  // Synchronous with respect to the host buffer: the caller may reuse src at once.
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyToDevice");
  Check(cudaStreamSynchronize(stream_), "CopyToDevice");
}

void CudaBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost");
}

void CudaBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "CopyOnDevice");
}

void CudaBackend::Memset(void* dst, int value, size_t bytes) {
  Check(cudaMemsetAsync(dst, value, bytes, stream_), "Memset");
}

MemoryInfo CudaBackend::GetMemoryInfo() const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return {};
  return {.total_bytes = static_cast<int64_t>(total_bytes),
          .free_bytes = static_cast<int64_t>(free_bytes)};
}

bool CudaBackend::Synchronize() {
  Check(cudaStreamSynchronize(stream_), "Synchronize");
  if (first_error_.empty()) return true;
  std::fprintf(stderr, "kvserve CUDA backend error: %s\n", first_error_.c_str());
  return false;
}

void CudaBackend::Linear(const LinearParams& p) {
  if (p.num_tokens == 0 || p.out_features == 0) return;
  // Column-major view: Y^T [out, T] = W [out, in] (row-major = col-major W^T, so op T) times
  // X^T [in, T] (row-major X is col-major X^T, op N).
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t status =
      cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, p.out_features, p.num_tokens, p.in_features,
                  &alpha, static_cast<const float*>(p.w), p.in_features, p.x, p.in_features, &beta, p.y, p.out_features);
  if (status != CUBLAS_STATUS_SUCCESS) {
    Check(cudaErrorUnknown, "Linear: cublasSgemm failed");
    return;
  }
  if (p.bias != nullptr) {
    AddBiasKernel<<<p.num_tokens, kThreads, 0, stream_>>>(p.y, p.bias, p.out_features);
    Check(cudaGetLastError(), "Linear: bias");
  }
}

}  // namespace kvserve::kernels::cuda
