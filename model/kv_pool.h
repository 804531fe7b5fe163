// KvPool: the memory of the paged KV cache of one rank, in a backend's memory (host RAM for the
// CPU backend, GPU memory for CUDA), stored as the layout's dtype (f32, bf16 or f16). For every
// layer one K pool and one V pool, each [num_blocks, num_kv_heads, block_size, head_dim] as
// kvcache/kv_layout.h describes, num_kv_heads being the rank's own (a tensor-parallel rank's
// pool holds only its KV heads: LlamaModel::kv_layout()). The KV cache manager (kvcache/) decides
// which block holds what; this object only owns the memory and hands out per-layer kernel views.
//
// Memory is allocated once in Create (one buffer for all layers) and zero-filled; nothing
// allocates afterwards.
// Thread-safety: not synchronised; the engine thread (or a test) owns it.
#ifndef KVSERVE_MODEL_KV_POOL_H_
#define KVSERVE_MODEL_KV_POOL_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernels.h"
#include "kvcache/kv_layout.h"
#include "model/device_buffer.h"

namespace kvserve {

// The kernels' name of a KV dtype; INVALID_ARGUMENT for one the kernels cannot store (fp8).
absl::StatusOr<kernels::DType> KvKernelDType(KvDtype dtype);

// The KV dtype a flag names: "float32", "bfloat16", "float16", or "auto" (= `weights`, the
// weight storage type). INVALID_ARGUMENT naming `flag` otherwise.
absl::StatusOr<KvDtype> ParseKvDtype(std::string_view value, kernels::DType weights,
                                     std::string_view flag);

class KvPool {
 public:
  // Allocates num_blocks blocks (block 0, the null block, included) for every layer in
  // backend's memory. INVALID_ARGUMENT when the layout is invalid, its dtype is not f32, bf16 or
  // f16, or num_blocks < 2; RESOURCE_EXHAUSTED when the backend has not the memory.
  // REQUIRES: backend outlives the pool.
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(const KvLayout& layout,
                                                        int32_t num_blocks,
                                                        kernels::Backend* backend);

  const KvLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int64_t bytes() const { return static_cast<int64_t>(memory_.bytes()); }
  kernels::Backend* backend() const { return backend_; }

  // The view the kernels take for layer `layer`. REQUIRES: 0 <= layer < layout().num_layers.
  kernels::PagedKvView Layer(int32_t layer) const;

  // Copies block src to block dst in every layer, K and V (a forked sequence's partial block).
  void CopyBlock(int32_t src, int32_t dst);

  // Copies block `block` of every layer, K then V per layer, into `out` (layout().
  // bytes_per_block() bytes in host memory; the host tier's block layout), waiting for the
  // stream first: KV block transfer. REQUIRES: 0 < block < num_blocks().
  void ReadBlock(int32_t block, char* out);

  // Fills every pool with zeros (tests use it to start over without reallocating).
  void Clear();

 private:
  KvPool(const KvLayout& layout, int32_t num_blocks, kernels::DType dtype,
         kernels::Backend* backend, DeviceBuffer memory)
      : layout_(layout),
        num_blocks_(num_blocks),
        dtype_(dtype),
        backend_(backend),
        memory_(std::move(memory)) {}

  KvLayout layout_;
  int32_t num_blocks_;
  kernels::DType dtype_;
  kernels::Backend* backend_;
  DeviceBuffer memory_;  // [num_layers][K, V][num_blocks, kv_heads, block_size, head_dim]
};

// The memory of the host KV tier (kvcache/host_block_pool.h decides what it holds): num_blocks
// blocks of a device pool's layout, host block h at h * block_bytes(), laid out
// [num_layers][K, V][kv_heads, block_size, head_dim], in the backend's host memory (page-locked
// on CUDA). Copies go through the backend's stream, so they are ordered with the kernels.
// Thread-safety: as KvPool.
class HostKvPool {
 public:
  // RESOURCE_EXHAUSTED when the host has not the memory; INVALID_ARGUMENT for num_blocks < 1.
  // REQUIRES: device outlives the pool.
  static absl::StatusOr<std::unique_ptr<HostKvPool>> Create(KvPool* device, int32_t num_blocks);
  ~HostKvPool();
  HostKvPool(const HostKvPool&) = delete;
  HostKvPool& operator=(const HostKvPool&) = delete;

  int32_t num_blocks() const { return num_blocks_; }
  int64_t block_bytes() const { return block_bytes_; }

  // Copies device block `block` into host block `host` (every layer, K and V), in stream order:
  // Store. The other way, beside the stream (Backend::CopyFromHostBeside), so that it overlaps
  // what is issued after it: Load; JoinLoads orders every later call after every Load so far.
  // Until then nothing may touch a loading block or write its host block (runner/host_copies.h
  // keeps that rule). REQUIRES: both ids in range (the device's null block excluded).
  void Store(int32_t block, int32_t host);
  void Load(int32_t host, int32_t block);
  void JoinLoads() { device_->backend()->JoinCopies(); }

  // KV block transfer: one block's bytes (block_bytes(), KvPool::ReadBlock's layout) read from
  // host block `host` into `out`, or written into it from `in`. Synchronous: they wait for the
  // stream's pending copies (Loads included) first. REQUIRES: host in range, `out` / `in` hold
  // block_bytes().
  void ReadHost(int32_t host, char* out);
  void WriteHost(int32_t host, const char* in);

 private:
  HostKvPool(KvPool* device, int32_t num_blocks, char* memory);
  // Calls fn(device part, host part, bytes) for each layer's K and V part of device block
  // `block` and host block `host`, in the host block's order.
  template <typename Fn>
  void ForEachPart(int32_t block, int32_t host, Fn fn);

  KvPool* device_;
  int32_t num_blocks_;
  int64_t block_bytes_;  // all layers, K and V
  char* memory_;         // [num_blocks, block_bytes]
  std::vector<kernels::Backend::CopyRegion> regions_;  // scratch of Load
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_KV_POOL_H_
