#include "kvcache/kv_layout.h"

#include "absl/strings/str_cat.h"

namespace kvserve {

int KvDtypeBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return 4;
    case KvDtype::kF16:
    case KvDtype::kBF16:
      return 2;
    case KvDtype::kFp8:
      return 1;
  }
  return 0;
}

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kFp8:
      return "fp8";
  }
  return "unknown";
}

absl::Status ValidateBlockSize(int block_size) {
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_size must be a power of two in [1, 256] (8, 16, 32 typical), got ", block_size));
  }
  return absl::OkStatus();
}

absl::Status KvLayout::Validate() const {
  if (num_layers <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_layers must be > 0, got ", num_layers));
  }
  if (num_kv_heads_local <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_kv_heads_local must be > 0, got ", num_kv_heads_local));
  }
  if (head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("head_dim must be > 0, got ", head_dim));
  }
  if (KvDtypeBytes(dtype) == 0) return absl::InvalidArgumentError("unknown KV dtype");
  return ValidateBlockSize(block_size);
}

int64_t KvLayout::elements_per_block_per_pool() const {
  return int64_t{num_kv_heads_local} * block_size * head_dim;
}

int64_t KvLayout::bytes_per_block_per_pool() const {
  return elements_per_block_per_pool() * KvDtypeBytes(dtype);
}

int64_t KvLayout::bytes_per_block() const {
  return 2 * int64_t{num_layers} * bytes_per_block_per_pool();
}

int64_t KvLayout::pool_bytes(int64_t num_blocks) const {
  return num_blocks * bytes_per_block_per_pool();
}

int64_t KvLayout::NumBlocksForBudget(int64_t kv_bytes) const {
  if (kv_bytes <= 0) return 0;
  return kv_bytes / bytes_per_block();
}

}  // namespace kvserve
