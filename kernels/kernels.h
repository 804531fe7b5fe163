// The kernel interface of kvserve: every piece of math the Llama-family forward pass needs, on a
// flattened batch of T tokens from S sequences, as plain params structs (raw pointers + sizes,
// a shape comment on every pointer) and one abstract Backend that runs them.
//
// Backends: CpuBackend (kernels/cpu/cpu_backend.h, host pointers, always built) and CudaBackend
// (kernels/cuda/cuda_backend.h, device pointers, built when KVSERVE_WITH_CUDA is defined). The
// CPU one is the reference the CUDA one is tested against.
//
// Conventions for every call:
//  - No call allocates. Scratch the attention needs is caller-provided workspace whose size comes
//    from Backend::AttentionWorkspaceBytes() (plan once, at start-up, for the largest batch).
//  - Activations are fp32, row-major, densely packed unless a stride says otherwise. Weights
//    and the paged KV cache carry their storage type (kernels/dtype.h): a Linear or Embedding
//    weight may be f32, bf16, f16 or (CPU) a GGUF block type; the KV cache f32, bf16 or f16.
//    Every kernel accumulates in fp32.
//  - Pointers are host pointers for CpuBackend and device pointers for CudaBackend; the integer
//    metadata (ids, positions, slot_mapping, query_start, context_lens, block_tables) lives
//    where the tensors live.
//  - Preconditions are written as REQUIRES and are not checked in release builds: the caller
//    (the model runner) builds the metadata and is trusted.
//  - "out may alias in" is stated per call where it holds; otherwise buffers must not overlap.
// Thread-safety: a Backend runs one call at a time (the engine thread owns it). Calls on a
// CudaBackend are asynchronous on its stream; Synchronize() waits for them.
#ifndef KVSERVE_KERNELS_KERNELS_H_
#define KVSERVE_KERNELS_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>

#include "kernels/dtype.h"

// Marks the few inline functions here that CUDA kernels call too (nvcc compiles them for both
// sides); plain inline functions for any other compiler.
#ifdef __CUDACC__
#define KVSERVE_HOST_DEVICE __host__ __device__
#else
#define KVSERVE_HOST_DEVICE
#endif

namespace kvserve::kernels {

// ---------------------------------------------------------------------------------------------
// RoPE. Kernels sit below model/, so they carry their own copy of the enums; the forward pass
// converts model::RopeStyle / RopeScaling into these.
enum class RopeStyle {
  kInterleaved,  // pairs (x[2i], x[2i+1])      — GGUF "llama" files
  kHalf,         // pairs (x[i], x[i + d/2])    — Hugging Face checkpoints, GGUF qwen2 ("neox")
};

enum class RopeScalingType { kNone, kLinear, kLlama3 };

// The rotary embedding of one model: frequencies inv_freq[i] = theta^(-2i/d), i < d/2, then
//  - kLinear: positions are divided by factor (inv_freq / factor);
//  - kLlama3: wavelengths longer than original_max_position / low_freq_factor are divided by
//    factor, shorter than original_max_position / high_freq_factor are kept, and the band in
//    between is interpolated smoothly (Llama 3.1's rule).
struct RopeConfig {
  int32_t head_dim = 0;  // rotary dimension = head_dim; REQUIRES: even, <= 512
  float theta = 10000.0f;
  RopeStyle style = RopeStyle::kHalf;
  RopeScalingType scaling = RopeScalingType::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;          // kLlama3 only
  float high_freq_factor = 4.0f;         // kLlama3 only
  int32_t original_max_position = 8192;  // kLlama3 only
};

// Fills inv_freq [head_dim / 2] with the (scaled) inverse frequencies of config. Host code,
// shared by every backend and by tests, so all agree on the frequencies.
void ComputeRopeInvFreq(const RopeConfig& config, float* inv_freq /* [head_dim / 2] */);

// ---------------------------------------------------------------------------------------------
// Params of each call.

// out[t, :] = table[ids[t], :] widened to fp32.  REQUIRES: 0 <= ids[t] < vocab; a backend
// supports the table types it supports for Linear.
struct EmbeddingParams {
  const int32_t* ids;  // [num_tokens]
  const void* table;   // [vocab, hidden] of table_dtype (rows of RowBytes(table_dtype, hidden))
  float* out;          // [num_tokens, hidden]
  int32_t num_tokens;
  int32_t vocab;
  int32_t hidden;
  DType table_dtype = DType::kF32;
  bool table_packed = false;  // in the backend's own layout (Backend::PackWeight)
};

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight.  out may alias x.
struct RmsNormParams {
  const float* x;       // [num_tokens, hidden]
  const float* weight;  // [hidden]
  float* out;           // [num_tokens, hidden]
  int32_t num_tokens;
  int32_t hidden;
  float eps;
};

// residual += x; out = rmsnorm(residual) * weight. The residual stream stays in fp32 in
// `residual`; out may alias x (not residual).
struct AddRmsNormParams {
  float* residual;      // [num_tokens, hidden], read and written
  const float* x;       // [num_tokens, hidden]
  const float* weight;  // [hidden]
  float* out;           // [num_tokens, hidden]
  int32_t num_tokens;
  int32_t hidden;
  float eps;
};

// y = x w^T (+ bias): y[t, o] = sum_i x[t, i] * w[o, i] + bias[o]. w is row-major [out, in] as
// in ModelWeights, each row RowBytes(w_dtype, in_features) bytes. y must not alias x or w.
// Types: every backend takes f32; CUDA takes bf16 and f16 (tensor cores, fp32 accumulation);
// the CPU takes those and GGUF block types (activations quantized per block to int8).
// REQUIRES: in_features % block_elements(w_dtype) == 0.
struct LinearParams {
  const float* x;     // [num_tokens, in_features]
  const void* w;      // [out_features, in_features] of w_dtype
  const float* bias;  // [out_features] or nullptr
  float* y;           // [num_tokens, out_features]
  int32_t num_tokens;
  int32_t in_features;
  int32_t out_features;
  DType w_dtype = DType::kF32;
  bool w_packed = false;  // w is in the backend's own layout (Backend::PackWeight)
};

// In-place rotary embedding of q and k at positions. Strides are in floats between consecutive
// tokens; 0 means densely packed (num_heads * head_dim, num_kv_heads * head_dim), so q and k can
// also be column slices of one fused QKV buffer. k may be nullptr (num_kv_heads ignored).
struct RopeParams {
  float* q;                  // [num_tokens, num_heads, head_dim], token stride q_stride
  float* k;                  // [num_tokens, num_kv_heads, head_dim], token stride k_stride
  const int32_t* positions;  // [num_tokens], >= 0
  int32_t num_tokens;
  int32_t num_heads;
  int32_t num_kv_heads;
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  RopeConfig config;  // config.head_dim is the head size

  // The strides in effect (the dense ones where the fields above are 0).
  int64_t q_token_stride() const {
    return q_stride ? q_stride : int64_t{num_heads} * config.head_dim;
  }
  int64_t k_token_stride() const {
    return k_stride ? k_stride : int64_t{num_kv_heads} * config.head_dim;
  }
};

// One layer's paged K and V (the layout the KV cache manager describes; slot = block_id *
// block_size + offset within the block), stored as dtype: f32, bf16 or f16. Writes round the
// fp32 K/V of a step to dtype; attention widens them back and accumulates in fp32.
// A plain view, passed by value.
struct PagedKvView {
  void* k;  // [num_blocks, num_kv_heads, block_size, head_dim] of dtype
  void* v;  // [num_blocks, num_kv_heads, block_size, head_dim] of dtype
  int32_t num_blocks;
  int32_t num_kv_heads;
  int32_t block_size;
  int32_t head_dim;
  DType dtype = DType::kF32;
};

// Where row (block, kv_head, offset_in_block) of a PagedKvView's k or v starts, in elements, in
// the layout [num_blocks, num_kv_heads, block_size, head_dim] (kvcache/kv_layout.h): the one
// place the kernels compute it, on the host and on the device (KV writes and attention of every
// backend). A token at slot s is at block s / block_size, offset s % block_size.
KVSERVE_HOST_DEVICE inline int64_t KvRowOffset(const PagedKvView& cache, int64_t block,
                                               int32_t kv_head, int32_t offset_in_block) {
  return ((block * cache.num_kv_heads + kv_head) * cache.block_size + offset_in_block) *
         cache.head_dim;
}

// Writes the new K/V of each token to its slot: cache.k[block, h, offset, :] = k[t, h, :] with
// block = slot_mapping[t] / block_size, offset = slot_mapping[t] % block_size. Tokens whose slot
// is -1 (padding) are skipped. REQUIRES: slots >= 0 are < num_blocks * block_size and distinct.
struct KvWriteParams {
  const float* k;               // [num_tokens, num_kv_heads, head_dim], token stride k_stride
  const float* v;               // [num_tokens, num_kv_heads, head_dim], token stride v_stride
  const int32_t* slot_mapping;  // [num_tokens]
  int32_t num_tokens;
  int64_t k_stride = 0;  // 0: num_kv_heads * head_dim
  int64_t v_stride = 0;
  PagedKvView cache;

  // The strides in effect (the dense one where the fields above are 0).
  int64_t k_token_stride() const {
    return k_stride ? k_stride : int64_t{cache.num_kv_heads} * cache.head_dim;
  }
  int64_t v_token_stride() const {
    return v_stride ? v_stride : int64_t{cache.num_kv_heads} * cache.head_dim;
  }
};

// Attention of a flattened batch over the paged cache, after this step's K/V were written.
// Sequence s owns query tokens [query_start[s], query_start[s+1]) and has context_lens[s] tokens
// in the cache, so its i-th query token (of n = query_start[s+1] - query_start[s]) sits at
// position p = context_lens[s] - n + i and attends to cache positions 0..p (causal inside a
// prefill chunk; a decode is n = 1). Cache position j of sequence s lives in block
// block_tables[s * max_blocks_per_seq + j / block_size] at offset j % block_size.
// Query head h reads KV head h / (num_heads / num_kv_heads) (GQA). Tokens of no sequence
// (t >= query_start[num_seqs], padding) get no output. A sequence with n = 0 is allowed.
// REQUIRES: num_heads % cache.num_kv_heads == 0; n <= context_lens[s] for every s;
// context_lens[s] <= max_blocks_per_seq * block_size; workspace of at least
// AttentionWorkspaceBytes(shape) bytes for a shape covering this call.
struct PagedAttentionParams {
  const float* q;               // [num_tokens, num_heads, head_dim], token stride q_stride
  float* out;                   // [num_tokens, num_heads, head_dim] (packed)
  const int32_t* query_start;   // [num_seqs + 1], query_start[0] = 0, non-decreasing
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  int32_t num_tokens;
  int32_t num_seqs;
  int32_t num_heads;
  int32_t max_blocks_per_seq;
  int32_t max_query_len;    // max over s of n; CUDA uses it to size the grid, CPU ignores it
  int32_t max_context_len;  // max over s of context_lens[s]; CUDA plans split-KV with it
  float scale;              // usually 1 / sqrt(head_dim)
  int64_t q_stride = 0;     // 0: num_heads * head_dim
  PagedKvView cache;
  void* workspace;  // AttentionWorkspaceBytes() bytes
  size_t workspace_bytes;

  // The stride in effect (the dense one where q_stride is 0).
  int64_t q_token_stride() const {
    return q_stride ? q_stride : int64_t{num_heads} * cache.head_dim;
  }
};

// The largest batch an attention workspace must serve; plan it once from the engine limits.
struct AttentionShape {
  int32_t max_num_tokens;  // max_num_batched_tokens
  int32_t max_num_seqs;
  int32_t max_context_len;  // longest context a sequence may reach
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t block_size;
};

// out[t, i] = silu(gate[t, i]) * up[t, i], silu(x) = x / (1 + e^-x). gate and up are two
// buffers (two separate projections); out may alias gate or up.
struct SiluAndMulParams {
  const float* gate;  // [num_tokens, intermediate]
  const float* up;    // [num_tokens, intermediate]
  float* out;         // [num_tokens, intermediate]
  int32_t num_tokens;
  int32_t intermediate;
};

// dst[r, :] = src[rows[r], :]: picks the positions that need logits before the lm_head matmul.
// REQUIRES: 0 <= rows[r] < src_rows.
struct GatherRowsParams {
  const float* src;     // [src_rows, cols]
  const int32_t* rows;  // [num_rows]
  float* dst;           // [num_rows, cols]
  int32_t src_rows;
  int32_t num_rows;
  int32_t cols;
};

// ids[r] = argmax_v logits[r, v]; ties go to the lowest id (as the CPU sampler's greedy).
struct ArgmaxParams {
  const float* logits;  // [num_rows, vocab]
  int32_t* ids;         // [num_rows]
  int32_t num_rows;
  int32_t vocab;
};

// Memory of a backend's device: what it holds in all, and what is free now.
struct MemoryInfo {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
};

// A recorded sequence of backend calls that can be replayed (a CUDA graph). Replaying reads the
// buffers the recorded calls named, as they are at replay time.
class Graph {
 public:
  virtual ~Graph() = default;
  // Enqueues the recorded calls; false when the device refused (the error is logged).
  virtual bool Replay() = 0;
};

// ---------------------------------------------------------------------------------------------
// A set of kernels bound to one kind of memory. See the file comment for the conventions.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual const char* name() const = 0;

  // Binds the calling thread to the backend's device: the current CUDA device is a property of
  // a thread, and a thread that never selected one calls device 0. Every thread that calls the
  // backend calls this once before its first call (the engine thread, a tensor-parallel
  // follower's step loop: ModelRunner::BindThread), so a backend on cuda:1 runs there. The CPU
  // has nothing to bind. False when the device refused.
  virtual bool MakeCurrent() { return true; }

  // --- Memory. Host memory for the CPU backend, device memory for CUDA. Allocation and copies
  // happen at start-up and between steps, never inside a captured graph.
  // Returns nullptr when the memory is not there (out of memory).
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  // Host memory that the copies below move blocks to and from (the host KV tier): page-locked
  // on CUDA, so that copies run at the bus's rate and asynchronously on the stream; plain
  // 64-byte-aligned memory by default. nullptr when the memory is not there.
  virtual void* AllocateHost(size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  }
  virtual void FreeHost(void* ptr) { std::free(ptr); }
  // Copies are ordered with the kernels on the backend's stream. CopyToDevice reads `src`
  // (host) before it returns; CopyToHost's `dst` is complete once Synchronize() returns.
  virtual void CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  // CopyToDevice from AllocateHost memory without waiting: `src` must stay as it is until the
  // stream reaches the copy (the host KV tier, whose blocks only copies on this stream write).
  virtual void CopyFromHostAsync(void* dst, const void* src, size_t bytes) {
    CopyToDevice(dst, src, bytes);
  }
  // Copies from AllocateHost memory that run beside the stream's kernels instead of in their
  // order (a second CUDA stream, a copy thread on the CPU), so that they overlap the work issued
  // after them: each batch starts after every call issued before it, and every call issued after
  // JoinCopies() runs after every batch issued before it (on CUDA the stream waits on the device,
  // the host does not). Until then nothing may read or write a batch's destinations or write its
  // sources. Synchronize() waits for these too. The default runs them at once, in stream order.
  struct CopyRegion {
    void* dst = nullptr;        // backend memory
    const void* src = nullptr;  // AllocateHost memory
    size_t bytes = 0;
  };
  virtual void CopyFromHostBeside(const CopyRegion* regions, int count) {
    for (int i = 0; i < count; ++i)
      CopyFromHostAsync(regions[i].dst, regions[i].src, regions[i].bytes);
  }
  virtual void JoinCopies() {}
  virtual void Memset(void* dst, int value, size_t bytes) = 0;
  virtual MemoryInfo GetMemoryInfo() const = 0;
  // True when the kernels read host memory directly (the CPU): data already in host memory,
  // a memory-mapped file say, can then be used in place instead of copied.
  virtual bool host_memory() const { return false; }

  // A backend may keep block-quantized matrices in a layout of its own that its Linear reads
  // faster (the CPU on AVX2 / AVX-512: 16-row tiles, cpu::PackQuantRows). PackedWeightBytes is the
  // size of that form of a [rows, cols] matrix of dtype, 0 when the backend has none for it;
  // PackWeight writes it from the rows as stored (host memory) into backend memory of that
  // size. A LinearParams whose w is such a matrix sets w_packed.
  virtual int64_t PackedWeightBytes(DType dtype, int64_t rows, int64_t cols) const { return 0; }
  virtual void PackWeight(const void* stored, DType dtype, int64_t rows, int64_t cols,
                          void* packed) {}
  // Whether Embedding reads a table of dtype in that packed form (EmbeddingParams::table_packed):
  // then a tied model keeps one packed table for the lookup and the output projection.
  virtual bool EmbeddingReadsPacked(DType dtype) const { return false; }

  // Sizes, once at start-up, the scratch Linear needs for up to max_num_tokens rows of up to
  // max_in_features inputs (CUDA rounds the activations to a 16-bit weight's type there); before
  // any graph is captured. False when the memory is not there. A no-op where nothing is needed.
  virtual bool ReserveLinear(int64_t max_num_tokens, int64_t max_in_features) {
    (void)max_num_tokens;
    (void)max_in_features;
    return true;
  }

  // Records the calls `record` makes on this backend into a Graph instead of running them.
  // nullptr when the backend has no graphs (the CPU) or capture failed: run eagerly then.
  virtual std::unique_ptr<Graph> Capture(const std::function<void()>& record) {
    (void)record;
    return nullptr;
  }

  // Bytes of workspace PagedAttention needs for any call within shape.
  virtual size_t AttentionWorkspaceBytes(const AttentionShape& shape) const = 0;

  virtual void Embedding(const EmbeddingParams& p) = 0;
  virtual void RmsNorm(const RmsNormParams& p) = 0;
  virtual void AddRmsNorm(const AddRmsNormParams& p) = 0;
  virtual void Linear(const LinearParams& p) = 0;
  // Several products of one input (q, k and v; gate and up): every p[i] has the same x,
  // num_tokens and in_features. A backend may run them as one parallel loop and prepare x once;
  // each result is what Linear(p[i]) gives. The default calls Linear for each.
  virtual void LinearSameInput(const LinearParams* p, int count) {
    for (int i = 0; i < count; ++i) Linear(p[i]);
  }
  virtual void Rope(const RopeParams& p) = 0;
  virtual void WriteKv(const KvWriteParams& p) = 0;
  virtual void PagedAttention(const PagedAttentionParams& p) = 0;
  virtual void SiluAndMul(const SiluAndMulParams& p) = 0;
  virtual void GatherRows(const GatherRowsParams& p) = 0;
  virtual void Argmax(const ArgmaxParams& p) = 0;

  // Waits until every call issued so far has finished (a no-op on the CPU). Returns false when
  // the device reported an error (the CUDA backend then logs it to stderr).
  virtual bool Synchronize() = 0;
};

}  // namespace kvserve::kernels

#endif  // KVSERVE_KERNELS_KERNELS_H_
