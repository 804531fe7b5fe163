#include "comm/nccl/nccl_communicator.h"

#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/nccl/nccl_module_abi.h"
#include "comm/rendezvous.h"
#include "kernels/backend_factory.h"

namespace kvserve {
namespace {

struct NcclEntryPoints {
  nccl_abi::UniqueIdFn unique_id = nullptr;
  nccl_abi::CreateFn create = nullptr;
};

absl::StatusOr<NcclEntryPoints> LoadEntryPoints() {
  std::string error;
  void* module = kernels::OpenCudaModule(&error);
  if (module == nullptr) return absl::FailedPreconditionError(error);
  NcclEntryPoints entry;
  entry.unique_id =
      reinterpret_cast<nccl_abi::UniqueIdFn>(dlsym(module, nccl_abi::kUniqueIdSymbol));
  entry.create = reinterpret_cast<nccl_abi::CreateFn>(dlsym(module, nccl_abi::kCreateSymbol));
  if (entry.unique_id == nullptr || entry.create == nullptr) {
    return absl::FailedPreconditionError(
        "libkvserve_cuda.so has no NCCL entry points (a module from an older build?)");
  }
  return entry;
}

// Rank 0 makes the group's id and publishes it; the others read it from the store.
absl::StatusOr<std::string> ExchangeUniqueId(const NcclEntryPoints& entry, int rank,
                                             Rendezvous& rendezvous) {
  const std::string key = rendezvous.Key("unique_id");
  if (rank != 0) return rendezvous.store().Get(key, rendezvous.deadline());
  std::string id(nccl_abi::kUniqueIdBytes, '\0');
  char error[512] = {0};
  if (entry.unique_id(id.data(), id.size(), error, sizeof(error)) != 0) {
    return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", error));
  }
  absl::Status published = rendezvous.store().Set(key, id, rendezvous.deadline());
  if (!published.ok()) return published;
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommOptions& options,
                                                                     kernels::Backend* backend) {
  KVSERVE_RETURN_IF_ERROR(ValidateCommOptions(options));
  if (backend == nullptr || std::string_view(backend->name()) != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("the NCCL communicator needs a CUDA backend, not ",
                     backend == nullptr ? "none" : backend->name()));
  }
  KVSERVE_ASSIGN_OR_RETURN(NcclEntryPoints entry, LoadEntryPoints());
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rendezvous,
                           Rendezvous::Join(options, "nccl"));
  absl::StatusOr<std::string> id = ExchangeUniqueId(entry, options.rank, *rendezvous);
  if (id.ok() && id->size() != nccl_abi::kUniqueIdBytes) {
    id = absl::InternalError(absl::StrCat("the NCCL id in the store has ", id->size(),
                                          " bytes, not ", nccl_abi::kUniqueIdBytes));
  }
  if (!id.ok()) {
    rendezvous->Abort(id.status());
    return id.status();
  }
  const int64_t init_timeout_ms =
      std::max<int64_t>(1, absl::ToInt64Milliseconds(rendezvous->deadline() - absl::Now()));
  int code = 0;
  char error[1024] = {0};
  Communicator* communicator =
      entry.create(backend, options.rank, options.size, id->data(), id->size(), init_timeout_ms,
                   absl::ToInt64Milliseconds(options.timeout), &code, error, sizeof(error));
  if (communicator == nullptr) {
    absl::Status failed(static_cast<absl::StatusCode>(code), error);
    rendezvous->Abort(failed);
    return failed;
  }
  // Every rank has read the id once the group has formed.
  rendezvous->Finish();
  return std::unique_ptr<Communicator>(communicator);
}

}  // namespace kvserve
