// The entry point of the CUDA backend module (libkvserve_cuda.so), which
// kernels/backend_factory.cc dlopens: one C symbol, so nothing else of the module's ABI is
// relied on across the boundary. (The NCCL communicator's entry points are in
// nccl_communicator.cc.)
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/entry_point_error.h"

using kvserve::kernels::cuda::SetEntryPointError;

// Makes a CudaBackend on device `index`, on a new non-blocking stream (graphs cannot be captured
// on the legacy default stream). nullptr with a message in `error` when there is no such device.
extern "C" kvserve::kernels::Backend* KvserveCreateCudaBackend(int index, char* error,
                                                               size_t error_bytes) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    SetEntryPointError(
        std::string("no CUDA device is available (") +
            (status != cudaSuccess ? cudaGetErrorString(status) : "the driver reports none") + ")",
        error, error_bytes);
    return nullptr;
  }
  if (index >= count) {
    SetEntryPointError("CUDA device " + std::to_string(index) + " does not exist (" +
                           std::to_string(count) + " present)",
                       error, error_bytes);
    return nullptr;
  }
  if (cudaSetDevice(index) != cudaSuccess) {
    SetEntryPointError("cannot select CUDA device " + std::to_string(index), error, error_bytes);
    return nullptr;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    SetEntryPointError("cannot create a CUDA stream", error, error_bytes);
    return nullptr;
  }
  std::string message;
  std::unique_ptr<kvserve::kernels::cuda::CudaBackend> backend =
      kvserve::kernels::cuda::CudaBackend::Create(stream, &message);
  if (backend == nullptr) {
    cudaStreamDestroy(stream);
    SetEntryPointError(message, error, error_bytes);
    return nullptr;
  }
  return backend.release();
}
