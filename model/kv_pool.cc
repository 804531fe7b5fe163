#include "model/kv_pool.h"

#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace kvserve {

absl::StatusOr<kernels::DType> KvKernelDType(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return kernels::DType::kF32;
    case KvDtype::kBF16:
      return kernels::DType::kBF16;
    case KvDtype::kF16:
      return kernels::DType::kF16;
    case KvDtype::kFp8:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("KV cache dtype ", std::string(KvDtypeName(dtype)), " is not supported"));
}

absl::StatusOr<KvDtype> ParseKvDtype(std::string_view value, kernels::DType weights,
                                     std::string_view flag) {
  if (value == "float32") return KvDtype::kF32;
  if (value == "bfloat16") return KvDtype::kBF16;
  if (value == "float16") return KvDtype::kF16;
  if (value == "auto") {
    if (weights == kernels::DType::kBF16) return KvDtype::kBF16;
    if (weights == kernels::DType::kF16) return KvDtype::kF16;
    return KvDtype::kF32;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(flag), ": must be auto, float32, bfloat16 or float16, got \"",
                   std::string(value), "\""));
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Create(const KvLayout& layout, int32_t num_blocks,
                                                       kernels::Backend* backend) {
  KVSERVE_RETURN_IF_ERROR(layout.Validate());
  KVSERVE_ASSIGN_OR_RETURN(kernels::DType dtype, KvKernelDType(layout.dtype));
  if (num_blocks < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_blocks: ", num_blocks, ", want >= 2 (block 0 is the null block)"));
  }
  const int64_t total_bytes = 2 * layout.num_layers * layout.pool_bytes(num_blocks);
  absl::StatusOr<DeviceBuffer> memory =
      DeviceBuffer::Allocate(backend, static_cast<size_t>(total_bytes),
                             absl::StrCat("the KV pool of ", num_blocks, " blocks"));
  if (!memory.ok()) return memory.status();
  std::unique_ptr<KvPool> pool(new KvPool(layout, num_blocks, dtype, backend, *std::move(memory)));
  pool->Clear();
  return pool;
}

kernels::PagedKvView KvPool::Layer(int32_t layer) const {
  const int64_t pool_bytes = layout_.pool_bytes(num_blocks_);
  char* k = memory_.as<char>() + 2 * layer * pool_bytes;
  return kernels::PagedKvView{.k = k,
                              .v = k + pool_bytes,
                              .num_blocks = num_blocks_,
                              .num_kv_heads = layout_.num_kv_heads_local,
                              .block_size = layout_.block_size,
                              .head_dim = layout_.head_dim,
                              .dtype = dtype_};
}

void KvPool::CopyBlock(int32_t src, int32_t dst) {
  const int64_t block_bytes = layout_.bytes_per_block_per_pool();
  for (int32_t layer = 0; layer < layout_.num_layers; ++layer) {
    const kernels::PagedKvView view = Layer(layer);
    for (void* pool : {view.k, view.v}) {
      char* bytes = static_cast<char*>(pool);
      backend_->CopyOnDevice(bytes + dst * block_bytes, bytes + src * block_bytes, block_bytes);
    }
  }
}

absl::StatusOr<std::unique_ptr<HostKvPool>> HostKvPool::Create(KvPool* device, int32_t num_blocks) {
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("host KV tier: num_blocks must be >= 1, got ", num_blocks));
  }
  const int64_t bytes = int64_t{num_blocks} * device->layout().bytes_per_block();
  void* memory = device->backend()->AllocateHost(static_cast<size_t>(bytes));
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the host KV tier of ",
                                                     num_blocks, " blocks (", bytes, " bytes)"));
  }
  return std::unique_ptr<HostKvPool>(
      new HostKvPool(device, num_blocks, static_cast<char*>(memory)));
}

HostKvPool::HostKvPool(KvPool* device, int32_t num_blocks, char* memory)
    : device_(device),
      num_blocks_(num_blocks),
      block_bytes_(device->layout().bytes_per_block()),
      memory_(memory) {}

HostKvPool::~HostKvPool() { device_->backend()->FreeHost(memory_); }

template <typename Fn>
void HostKvPool::ForEachPart(int32_t block, int32_t host, Fn fn) {
  const int64_t bytes = device_->layout().bytes_per_block_per_pool();
  char* host_part = memory_ + host * block_bytes_;
  for (int32_t layer = 0; layer < device_->layout().num_layers; ++layer) {
    const kernels::PagedKvView view = device_->Layer(layer);
    for (void* pool : {view.k, view.v}) {
      fn(static_cast<char*>(pool) + block * bytes, host_part, bytes);
      host_part += bytes;
    }
  }
}

void HostKvPool::Store(int32_t block, int32_t host) {
  ForEachPart(block, host, [&](char* device, char* host_part, int64_t bytes) {
    device_->backend()->CopyToHost(host_part, device, bytes);
  });
}

void HostKvPool::Load(int32_t host, int32_t block) {
  regions_.clear();
  ForEachPart(block, host, [&](char* device, char* host_part, int64_t bytes) {
    regions_.push_back({.dst = device, .src = host_part, .bytes = static_cast<size_t>(bytes)});
  });
  device_->backend()->CopyFromHostBeside(regions_.data(), static_cast<int>(regions_.size()));
}

void HostKvPool::ReadHost(int32_t host, char* out) {
  device_->backend()->Synchronize();
  std::memcpy(out, memory_ + host * block_bytes_, static_cast<size_t>(block_bytes_));
}

void HostKvPool::WriteHost(int32_t host, const char* in) {
  device_->backend()->Synchronize();  // no load may still be reading the entry
  std::memcpy(memory_ + host * block_bytes_, in, static_cast<size_t>(block_bytes_));
}

void KvPool::ReadBlock(int32_t block, char* out) {
  backend_->Synchronize();
  const int64_t bytes = layout_.bytes_per_block_per_pool();
  for (int32_t layer = 0; layer < layout_.num_layers; ++layer) {
    const kernels::PagedKvView view = Layer(layer);
    for (const void* pool : {view.k, view.v}) {
      backend_->CopyToHost(out, static_cast<const char*>(pool) + block * bytes, bytes);
      out += bytes;
    }
  }
}

void KvPool::Clear() { backend_->Memset(memory_.data(), 0, memory_.bytes()); }

}  // namespace kvserve
