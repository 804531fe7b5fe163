// CudaBackend: creation, error tracking, synchronisation, device memory and the activation
// scratch. The launchers live beside their kernels (elementwise.cu, linear.cu, dispatch.cu);
// graph capture in cuda_graph.cu.
#include <cublas_v2.h>

#include <cstdio>
#include <string>

#include "kernels/cuda/cuda_backend.h"

namespace kvserve::kernels::cuda {

std::unique_ptr<CudaBackend> CudaBackend::Create(cudaStream_t stream, std::string* error) {
  int device = 0;
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    cudaGetLastError();  // "no device" must not linger for the next call to find
    *error = std::string("no CUDA device: ") +
             (status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0");
    return nullptr;
  }
  int num_sms = 0;
  if ((status = cudaGetDevice(&device)) != cudaSuccess ||
      (status = cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device)) !=
          cudaSuccess ||
      (status = PrepareKernels()) != cudaSuccess) {
    *error = std::string("CUDA device set-up failed: ") + cudaGetErrorString(status);
    return nullptr;
  }
  cudaStream_t capture_stream = nullptr;
  if ((status = cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking)) != cudaSuccess) {
    *error = std::string("cudaStreamCreate failed: ") + cudaGetErrorString(status);
    return nullptr;
  }
  void* workspace = nullptr;
  if ((status = cudaMalloc(&workspace, kCublasWorkspaceBytes)) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamDestroy(capture_stream);
    *error = std::string("cuBLAS workspace: ") + cudaGetErrorString(status);
    return nullptr;
  }
  cublasHandle_t cublas = nullptr;
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS) {
    if (cublas != nullptr) cublasDestroy(cublas);
    cudaFree(workspace);
    cudaStreamDestroy(capture_stream);
    *error = "cuBLAS could not be initialised";
    return nullptr;
  }
  std::unique_ptr<CudaBackend> backend(
      new CudaBackend(device, stream, capture_stream, cublas, workspace, num_sms));
  if (!backend->BindCublas(stream)) {
    *error = "cuBLAS could not be bound to the stream and workspace";
    return nullptr;
  }
  return backend;
}

bool CudaBackend::MakeCurrent() {
  const cudaError_t status = cudaSetDevice(device_);
  if (status != cudaSuccess) {
    Fail("cudaSetDevice(" + std::to_string(device_) + "): " + cudaGetErrorString(status));
    return false;
  }
  return true;
}

CudaBackend::~CudaBackend() {
  cublasDestroy(cublas_);
  cudaFree(cublas_workspace_);
  cudaFree(linear_scratch_);
  cudaStreamDestroy(capture_stream_);
  if (copy_stream_ != nullptr) {
    cudaStreamSynchronize(copy_stream_);
    cudaEventDestroy(before_copies_);
    cudaEventDestroy(after_copies_);
    cudaStreamDestroy(copy_stream_);
  }
}

void CudaBackend::Check(cudaError_t status, const char* what) {
  if (status == cudaSuccess || !first_error_.empty()) return;
  first_error_ = std::string(what) + ": " + cudaGetErrorString(status);
}

void CudaBackend::Fail(const std::string& message) {
  if (first_error_.empty()) first_error_ = message;
}

bool CudaBackend::BindCublas(cudaStream_t stream) {
  return cublasSetStream(cublas_, stream) == CUBLAS_STATUS_SUCCESS &&
         cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes) ==
             CUBLAS_STATUS_SUCCESS;
}

bool CudaBackend::ReserveLinear(int64_t max_num_tokens, int64_t max_in_features) {
  const size_t bytes = static_cast<size_t>(max_num_tokens) * max_in_features * 2;  // 16-bit
  if (bytes <= linear_scratch_bytes_) return true;
  // The old buffer may still be read by queued GEMMs.
  Check(cudaStreamSynchronize(stream_), "ReserveLinear");
  cudaFree(linear_scratch_);
  linear_scratch_ = nullptr;
  linear_scratch_bytes_ = 0;
  if (cudaMalloc(&linear_scratch_, bytes) != cudaSuccess) {
    cudaGetLastError();  // out of memory is not sticky; clear it
    linear_scratch_ = nullptr;
    return false;
  }
  linear_scratch_bytes_ = bytes;
  return true;
}

void* CudaBackend::Allocate(size_t bytes) {
  void* ptr = nullptr;
  if (cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory is not sticky; clear it
    return nullptr;
  }
  return ptr;
}

void* CudaBackend::AllocateHost(size_t bytes) {
  void* ptr = nullptr;
  if (cudaHostAlloc(&ptr, bytes == 0 ? 1 : bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return ptr;
}

void CudaBackend::FreeHost(void* ptr) {
  if (ptr != nullptr) Check(cudaFreeHost(ptr), "FreeHost");
}

void CudaBackend::Free(void* ptr) {
  if (ptr != nullptr) Check(cudaFree(ptr), "Free");
}

void CudaBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  // Synchronous with respect to the host buffer: the caller may reuse src at once.
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyToDevice");
  Check(cudaStreamSynchronize(stream_), "CopyToDevice");
}

void CudaBackend::CopyFromHostAsync(void* dst, const void* src, size_t bytes) {
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "CopyFromHostAsync");
}

void CudaBackend::CopyFromHostBeside(const CopyRegion* regions, int count) {
  if (count <= 0) return;
  if (copy_stream_ == nullptr) {
    Check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "copy stream");
    Check(cudaEventCreateWithFlags(&before_copies_, cudaEventDisableTiming), "copy event");
    Check(cudaEventCreateWithFlags(&after_copies_, cudaEventDisableTiming), "copy event");
    if (!first_error_.empty()) return;
  }
  // After everything issued on stream_ so far (a store may still be reading a destination, or
  // writing a source).
  Check(cudaEventRecord(before_copies_, stream_), "CopyFromHostBeside");
  Check(cudaStreamWaitEvent(copy_stream_, before_copies_, 0), "CopyFromHostBeside");
  for (int i = 0; i < count; ++i) {
    Check(cudaMemcpyAsync(regions[i].dst, regions[i].src, regions[i].bytes, cudaMemcpyHostToDevice,
                          copy_stream_),
          "CopyFromHostBeside");
  }
  copies_pending_ = true;
}

void CudaBackend::JoinCopies() {
  if (!copies_pending_) return;
  Check(cudaEventRecord(after_copies_, copy_stream_), "JoinCopies");
  Check(cudaStreamWaitEvent(stream_, after_copies_, 0), "JoinCopies");
  copies_pending_ = false;
}

void CudaBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CopyToHost");
}

void CudaBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  // REQUIRES: the ranges do not overlap (cudaMemcpy's rule; the CPU backend's memmove is laxer).
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "CopyOnDevice");
}

void CudaBackend::Memset(void* dst, int value, size_t bytes) {
  Check(cudaMemsetAsync(dst, value, bytes, stream_), "Memset");
}

MemoryInfo CudaBackend::GetMemoryInfo() const {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();  // do not let it surface as the next launch's error
    return {};
  }
  return {.total_bytes = static_cast<int64_t>(total_bytes),
          .free_bytes = static_cast<int64_t>(free_bytes)};
}

bool CudaBackend::Synchronize() {
  JoinCopies();
  Check(cudaStreamSynchronize(stream_), "Synchronize");
  if (first_error_.empty()) return true;
  std::fprintf(stderr, "kvserve CUDA backend error: %s\n", first_error_.c_str());
  return false;
}

}  // namespace kvserve::kernels::cuda
