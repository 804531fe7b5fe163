#include "model/kv_pool.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<HostKvPool>> HostKvPool::Create(const KvLayout& layout,
                                                               int32_t num_blocks) {
  if (absl::Status status = layout.Validate(); !status.ok()) return status;
  if (layout.dtype != KvDtype::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("HostKvPool holds fp32 K/V, layout dtype is ",
                                                   std::string(KvDtypeName(layout.dtype))));
  }
  if (num_blocks < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_blocks: ", num_blocks, ", want >= 2 (block 0 is the null block)"));
  }
  const int64_t total_bytes = 2 * layout.num_layers * layout.pool_bytes(num_blocks);
  constexpr int64_t kMaxBytes = int64_t{64} << 30;
  if (total_bytes > kMaxBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV pool of ", num_blocks, " blocks needs ", total_bytes, " bytes"));
  }
  return std::unique_ptr<HostKvPool>(new HostKvPool(layout, num_blocks));
}

HostKvPool::HostKvPool(const KvLayout& layout, int32_t num_blocks)
    : layout_(layout), num_blocks_(num_blocks) {
  const size_t elements = static_cast<size_t>(layout.elements_per_block_per_pool()) * num_blocks;
  k_.assign(layout.num_layers, std::vector<float>(elements, 0.0f));
  v_.assign(layout.num_layers, std::vector<float>(elements, 0.0f));
}

int64_t HostKvPool::bytes() const {
  return 2 * layout_.num_layers * layout_.pool_bytes(num_blocks_);
}

kernels::PagedKvView HostKvPool::Layer(int32_t layer) {
  return kernels::PagedKvView{.k = k_[layer].data(),
                              .v = v_[layer].data(),
                              .num_blocks = num_blocks_,
                              .num_kv_heads = layout_.num_kv_heads_local,
                              .block_size = layout_.block_size,
                              .head_dim = layout_.head_dim};
}

void HostKvPool::Clear() {
  for (auto& pool : k_) std::fill(pool.begin(), pool.end(), 0.0f);
  for (auto& pool : v_) std::fill(pool.begin(), pool.end(), 0.0f);
}

}  // namespace kvserve
