// How the CUDA module's extern "C" entry points (module.cu, nccl_communicator.cc) hand an error
// message back across the dlopen boundary: copied, truncated and NUL-terminated, into the
// caller's buffer.
#ifndef KVSERVE_KERNELS_CUDA_ENTRY_POINT_ERROR_H_
#define KVSERVE_KERNELS_CUDA_ENTRY_POINT_ERROR_H_

#include <cstddef>
#include <cstring>
#include <string>

namespace kvserve::kernels::cuda {

inline void SetEntryPointError(const std::string& message, char* error, size_t error_bytes) {
  if (error == nullptr || error_bytes == 0) return;
  std::strncpy(error, message.c_str(), error_bytes - 1);
  error[error_bytes - 1] = '\0';
}

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_ENTRY_POINT_ERROR_H_
