// Host C++ (compiled by the C++ compiler, not nvcc): NCCL's API is host code, and absl's
// headers stay out of nvcc.
#include "comm/nccl/cuda_nccl_communicator.h"

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "comm/collective_args.h"
#include "comm/nccl/nccl_module_abi.h"
#include "kernels/cuda/entry_point_error.h"

namespace kvserve::kernels::cuda {
namespace {

static_assert(sizeof(ncclUniqueId) == nccl_abi::kUniqueIdBytes,
              "comm/nccl/nccl_module_abi.h disagrees with nccl.h on the unique id's size");

// Between polls: yield for the first polls (a collective takes microseconds), then sleep.
void Backoff(int* polls) {
  if (++*polls < 2000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

absl::StatusCode CodeOf(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return absl::StatusCode::kOk;
    case ncclSystemError:  // sockets, shared memory: a peer that went away
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status NcclError(ncclResult_t result, ncclComm_t comm, const std::string& where) {
  std::string message = absl::StrCat(where, ": ", ncclGetErrorString(result));
  if (const char* detail = ncclGetLastError(comm); detail != nullptr && *detail != '\0') {
    absl::StrAppend(&message, " (", detail, ")");
  }
  return absl::Status(CodeOf(result), message);
}

absl::Status CudaError(cudaError_t error, const std::string& where) {
  return absl::InternalError(absl::StrCat(where, ": ", cudaGetErrorString(error)));
}

std::string Millis(std::chrono::milliseconds duration) {
  return absl::StrCat(duration.count(), " ms");
}

ncclDataType_t NcclType(DType dtype) { return dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat32; }

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    CudaBackend* backend, int rank, int size, const ncclUniqueId& id,
    std::chrono::milliseconds init_timeout, std::chrono::milliseconds timeout) {
  const std::string who = absl::StrCat("NCCL rank ", rank, " of ", size);
  int device = 0;
  if (cudaStreamGetDevice(backend->stream(), &device) != cudaSuccess &&
      cudaGetDevice(&device) != cudaSuccess) {
    return absl::InternalError(absl::StrCat(who, ": cannot tell the backend's device"));
  }
  if (cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
    return CudaError(error, absl::StrCat(who, ": selecting device ", device));
  }
  // Made first, so that its destructor frees whatever the steps below have allocated.
  std::unique_ptr<NcclCommunicator> communicator(
      new NcclCommunicator(backend, nullptr, rank, size, device, nullptr, nullptr, timeout));
  if (cudaError_t error = cudaEventCreateWithFlags(&communicator->done_, cudaEventDisableTiming);
      error != cudaSuccess) {
    return CudaError(error, absl::StrCat(who, ": creating an event"));
  }
  if (cudaError_t error =
          cudaMalloc(reinterpret_cast<void**>(&communicator->barrier_value_), sizeof(float));
      error != cudaSuccess) {
    return CudaError(error, absl::StrCat(who, ": allocating the barrier's float"));
  }
  if (cudaError_t error = cudaMemset(communicator->barrier_value_, 0, sizeof(float));
      error != cudaSuccess) {
    return CudaError(error, absl::StrCat(who, ": clearing the barrier's float"));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t result = ncclCommInitRankConfig(&communicator->comm_, size, id, rank, &config);
  const Clock::time_point deadline = Clock::now() + init_timeout;
  int polls = 0;
  while (result == ncclInProgress && Clock::now() < deadline) {
    Backoff(&polls);
    if (ncclResult_t polled = ncclCommGetAsyncError(communicator->comm_, &result);
        polled != ncclSuccess) {
      result = polled;
    }
  }
  if (result == ncclSuccess) return communicator;
  absl::Status status =
      result == ncclInProgress
          ? absl::DeadlineExceededError(
                absl::StrCat(who, ": the group did not form within ", Millis(init_timeout),
                             " (did every rank start, and can the ranks reach each other?)"))
          : NcclError(result, communicator->comm_, absl::StrCat(who, ": joining the group"));
  if (communicator->comm_ != nullptr) ncclCommAbort(communicator->comm_);
  communicator->comm_ = nullptr;
  return status;
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    // Finalize flushes what is still enqueued; a group that no longer answers is aborted.
    ncclResult_t result = ncclCommFinalize(comm_);
    const Clock::time_point deadline = Clock::now() + timeout_;
    int polls = 0;
    while (result == ncclInProgress && Clock::now() < deadline) {
      Backoff(&polls);
      if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) break;
    }
    if (result == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (barrier_value_ != nullptr) cudaFree(barrier_value_);
}

absl::Status NcclCommunicator::AllReduceSum(void* data, int64_t count, DType dtype) {
  std::lock_guard<std::mutex> lock(call_mu_);
  if (!failed_.ok()) return failed_;
  KVSERVE_RETURN_IF_ERROR(comm_internal::CheckAllReduceArgs(count, dtype));
  if (count == 0) return absl::OkStatus();
  return Run(absl::StrCat("all-reduce of ", count, " ", DTypeName(dtype), " values"),
             [&](cudaStream_t stream) {
               return ncclAllReduce(data, data, static_cast<size_t>(count), NcclType(dtype),
                                    ncclSum, comm_, stream);
             });
}

absl::Status NcclCommunicator::AllGather(const void* in, void* out, size_t bytes) {
  std::lock_guard<std::mutex> lock(call_mu_);
  if (!failed_.ok()) return failed_;
  if (bytes == 0) return absl::OkStatus();
  return Run(absl::StrCat("all-gather of ", bytes, " bytes per rank"), [&](cudaStream_t stream) {
    return ncclAllGather(in, out, bytes, ncclUint8, comm_, stream);
  });
}

absl::Status NcclCommunicator::Broadcast(void* data, size_t bytes, int root) {
  std::lock_guard<std::mutex> lock(call_mu_);
  if (!failed_.ok()) return failed_;
  KVSERVE_RETURN_IF_ERROR(comm_internal::CheckRoot(root, size_));
  if (bytes == 0) return absl::OkStatus();
  return Run(absl::StrCat("broadcast of ", bytes, " bytes from rank ", root),
             [&](cudaStream_t stream) {
               return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream);
             });
}

absl::Status NcclCommunicator::Barrier() {
  std::lock_guard<std::mutex> lock(call_mu_);
  if (!failed_.ok()) return failed_;
  return Run("barrier", [&](cudaStream_t stream) {
    return ncclAllReduce(barrier_value_, barrier_value_, 1, ncclFloat32, ncclSum, comm_, stream);
  });
}

absl::Status NcclCommunicator::Run(const std::string& what,
                                   const std::function<ncclResult_t(cudaStream_t)>& call) {
  const std::string where = absl::StrCat("NCCL ", what, " on rank ", rank_, " of ", size_);
  if (cudaError_t error = cudaSetDevice(device_); error != cudaSuccess) {
    return Fail(CudaError(error, where));
  }
  const Clock::time_point deadline = Clock::now() + timeout_;
  // The backend's stream at this moment: its capture stream while a graph is being recorded.
  const cudaStream_t stream = backend_->stream();
  if (absl::Status issued = WaitIssued(where, call(stream), deadline); !issued.ok()) {
    return Fail(issued);
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t error = cudaStreamIsCapturing(stream, &capture); error != cudaSuccess) {
    return Fail(CudaError(error, where));
  }
  if (capture == cudaStreamCaptureStatusActive) return absl::OkStatus();
  if (absl::Status done = WaitDone(where, stream, deadline); !done.ok()) return Fail(done);
  return absl::OkStatus();
}

absl::Status NcclCommunicator::WaitIssued(const std::string& where, ncclResult_t result,
                                          Clock::time_point deadline) {
  int polls = 0;
  while (result == ncclInProgress) {
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(where, " was not issued within ", Millis(timeout_)));
    }
    Backoff(&polls);
    if (ncclResult_t polled = ncclCommGetAsyncError(comm_, &result); polled != ncclSuccess) {
      result = polled;
    }
  }
  return result == ncclSuccess ? absl::OkStatus() : NcclError(result, comm_, where);
}

absl::Status NcclCommunicator::WaitDone(const std::string& where, cudaStream_t stream,
                                        Clock::time_point deadline) {
  if (cudaError_t error = cudaEventRecord(done_, stream); error != cudaSuccess) {
    return CudaError(error, where);
  }
  int polls = 0;
  while (true) {
    const cudaError_t query = cudaEventQuery(done_);
    if (query == cudaSuccess) return absl::OkStatus();
    if (query != cudaErrorNotReady) return CudaError(query, where);
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t polled = ncclCommGetAsyncError(comm_, &state); polled != ncclSuccess) {
      state = polled;
    }
    if (state != ncclSuccess && state != ncclInProgress) return NcclError(state, comm_, where);
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          where, " did not complete within ", Millis(timeout_), " (a peer is stuck or gone)"));
    }
    Backoff(&polls);
  }
}

void NcclCommunicator::Abort() {
  std::unique_lock<std::mutex> lock(call_mu_, std::try_to_lock);
  if (!lock.owns_lock() || comm_ == nullptr) return;  // a call in flight aborts at its deadline
  cudaSetDevice(device_);
  (void)Fail(absl::UnavailableError(absl::StrCat("NCCL communicator of rank ", rank_, " of ", size_,
                                                 " aborted: the tensor-parallel group is broken")));
}

absl::Status NcclCommunicator::Fail(absl::Status status) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  failed_ = std::move(status);
  return failed_;
}

}  // namespace kvserve::kernels::cuda

// ---------------------------------------------------------------------------------------------
// Entry points (comm/nccl/nccl_module_abi.h), dlsym'ed by comm/nccl/nccl_communicator.cc.

extern "C" int KvserveNcclUniqueId(char* id, size_t id_bytes, char* error, size_t error_bytes) {
  using kvserve::kernels::cuda::SetEntryPointError;
  if (id_bytes != sizeof(ncclUniqueId)) {
    SetEntryPointError(
        absl::StrCat("an NCCL id has ", sizeof(ncclUniqueId), " bytes, not ", id_bytes), error,
        error_bytes);
    return -1;
  }
  ncclUniqueId unique_id;
  if (ncclResult_t result = ncclGetUniqueId(&unique_id); result != ncclSuccess) {
    SetEntryPointError(ncclGetErrorString(result), error, error_bytes);
    return -1;
  }
  std::memcpy(id, &unique_id, sizeof(unique_id));
  return 0;
}

extern "C" kvserve::Communicator* KvserveCreateNcclCommunicator(
    kvserve::kernels::Backend* backend, int rank, int size, const char* id, size_t id_bytes,
    int64_t init_timeout_ms, int64_t timeout_ms, int* code, char* error, size_t error_bytes) {
  using kvserve::kernels::cuda::NcclCommunicator;
  using kvserve::kernels::cuda::SetEntryPointError;
  // The factory checked the name; the backend was made by this module, so the cast is exact.
  if (backend == nullptr || std::strcmp(backend->name(), "cuda") != 0 ||
      id_bytes != sizeof(ncclUniqueId)) {
    *code = static_cast<int>(absl::StatusCode::kInvalidArgument);
    SetEntryPointError("the NCCL communicator needs a CUDA backend and a whole NCCL id", error,
                       error_bytes);
    return nullptr;
  }
  ncclUniqueId unique_id;
  std::memcpy(&unique_id, id, sizeof(unique_id));
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> communicator = NcclCommunicator::Create(
      static_cast<kvserve::kernels::cuda::CudaBackend*>(backend), rank, size, unique_id,
      std::chrono::milliseconds(init_timeout_ms), std::chrono::milliseconds(timeout_ms));
  if (!communicator.ok()) {
    *code = static_cast<int>(communicator.status().code());
    SetEntryPointError(std::string(communicator.status().message()), error, error_bytes);
    return nullptr;
  }
  return communicator->release();
}
