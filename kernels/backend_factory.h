// CreateBackend: the one place a device name becomes a kernels::Backend, for the worker, the
// tools and the benchmarks.
//
//   "cpu"               the CPU backend (host memory) with num_threads threads (<= 0: all cores);
//                       it packs Q8_0 / Q4_0 / Q4_1 matrices for its AVX2 / AVX-512 kernels unless
//                       the environment sets KVSERVE_CPU_PACK=0 (to compare with the rows as
//                       stored)
//   "cuda" / "cuda:N"   the CUDA backend on device N (default 0), on its own stream
//
// Returns nullptr and sets *error (naming the cause: an unknown name, a build without CUDA, no
// device, a device index out of range) when the backend cannot be made. Thread-safety: any
// thread; the result belongs to the caller.
#ifndef KVSERVE_KERNELS_BACKEND_FACTORY_H_
#define KVSERVE_KERNELS_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <string_view>

#include "kernels/kernels.h"

namespace kvserve::kernels {

std::unique_ptr<Backend> CreateBackend(std::string_view device, int num_threads,
                                       std::string* error);

// True for "cuda" and "cuda:N" names (whether or not a device is present).
bool IsCudaDevice(std::string_view device);

// The CUDA module (libkvserve_cuda.so), dlopened once and kept for the life of the process,
// for its other entry points (comm/nccl/nccl_communicator.h's NCCL factory): found through
// $KVSERVE_CUDA_MODULE, beside the executable, in the build tree, then the loader's path.
// nullptr with *error naming the cause when it cannot be loaded. Thread-safety: any thread.
void* OpenCudaModule(std::string* error);

}  // namespace kvserve::kernels

#endif  // KVSERVE_KERNELS_BACKEND_FACTORY_H_
