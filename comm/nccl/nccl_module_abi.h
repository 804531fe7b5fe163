// The C entry points of the CUDA module (libkvserve_cuda.so) that make NCCL communicators,
// shared by the module (comm/nccl/cuda_nccl_communicator.cc defines them) and the factory that
// dlsyms them (comm/nccl/nccl_communicator.cc), so both sides agree on one signature.
#ifndef KVSERVE_COMM_NCCL_NCCL_MODULE_ABI_H_
#define KVSERVE_COMM_NCCL_NCCL_MODULE_ABI_H_

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"
#include "kernels/kernels.h"

namespace kvserve::nccl_abi {

// Bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES; checked against nccl.h in the module).
inline constexpr size_t kUniqueIdBytes = 128;

inline constexpr const char* kUniqueIdSymbol = "KvserveNcclUniqueId";
inline constexpr const char* kCreateSymbol = "KvserveCreateNcclCommunicator";

// Writes a new ncclUniqueId (kUniqueIdBytes) to `id`. Returns 0, or -1 with a message in
// `error` (error_bytes long, NUL-terminated).
using UniqueIdFn = int (*)(char* id, size_t id_bytes, char* error, size_t error_bytes);

// The NCCL communicator of `rank` in a group of `size` on `backend` (a CUDA backend made by the
// same module), joined with rank 0's id: waits until the group forms or init_timeout_ms; each
// collective then has timeout_ms. The caller owns the result. nullptr on failure, with an
// absl::StatusCode in *code and a message in `error`.
using CreateFn = Communicator* (*)(kernels::Backend* backend, int rank, int size, const char* id,
                                   size_t id_bytes, int64_t init_timeout_ms, int64_t timeout_ms,
                                   int* code, char* error, size_t error_bytes);

}  // namespace kvserve::nccl_abi

#endif  // KVSERVE_COMM_NCCL_NCCL_MODULE_ABI_H_
