// CudaBackend: the kernel interface (kernels/kernels.h) on device pointers, asynchronous on one
// CUDA stream. Built only when KVSERVE_WITH_CUDA is defined.
//
// Every launcher only enqueues work: nothing is allocated, nothing is copied to the host and
// nothing waits, so a decode step can be captured in a CUDA graph (Capture). Scratch comes from
// the caller (PagedAttentionParams::workspace, sized by AttentionWorkspaceBytes) or was sized
// once up front (Reserve, for Linear with 16-bit weights). Errors are sticky in the backend;
// Synchronize() waits and reports the first one.
// Kernels with compile-time sizes are dispatched from runtime values in one place
// (kernels/cuda/dispatch.cu): head_dim 64, 80, 96, 128 and storage types f32, bf16, f16; any
// other head_dim or KV / weight / table type is a reported error naming it.
//
// Attention (paged_attention.cuh, prefill_attention.cuh): sequences with one query token go to
// a decode kernel (one thread block per sequence, head group sharing a KV head, and KV split for
// long contexts, merged by a second kernel); sequences with more go to a prefill kernel (one
// block per tile of query tokens x head group, K/V streamed through shared memory). Both are
// launched for every call whose max_query_len allows them, and each block checks on the device
// whether its sequence is its kind, so the host needs no device metadata.
// KV cache: f32, bf16 or f16 (PagedKvView::dtype); written rounded, read widened, fp32 math.
// REQUIRES for bf16 / f16 / f32 caches: cache.k and cache.v 16-byte aligned (vector loads).
// Linear: f32 weights through cuBLAS SGEMM in fp32 (no TF32), so results track the CPU backend
// closely; bf16 / f16 weights, one token and up to 8192 rows, through our GEMV (every weight of
// one input in one launch), otherwise through cublasGemmEx on tensor cores with fp32
// accumulation and fp32 output, after rounding the activations to the weight type in the
// ReserveLinear()d scratch.
// Thread-safety: one thread at a time, as for Backend.
#ifndef KVSERVE_KERNELS_CUDA_CUDA_BACKEND_H_
#define KVSERVE_KERNELS_CUDA_CUDA_BACKEND_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "kernels/kernels.h"

struct cublasContext;

namespace kvserve::kernels::cuda {

class CudaBackend final : public Backend {
 public:
  // On the current device, enqueueing on stream (nullptr: the legacy default stream). Allocates
  // the cuBLAS workspace (kCublasWorkspaceBytes) and a private stream for graph capture.
  // Returns nullptr and sets *error when there is no usable device or cuBLAS cannot start.
  static std::unique_ptr<CudaBackend> Create(cudaStream_t stream, std::string* error);
  ~CudaBackend() override;

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;  // cuBLAS' advice for sm_90

  const char* name() const override { return "cuda"; }
  // cudaSetDevice(the device current when Create ran).
  bool MakeCurrent() override;
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // Sizes the scratch into which Linear rounds fp32 activations for bf16 / f16 weights: enough
  // for any call with num_tokens * in_features <= max_num_tokens * max_in_features (e.g.
  // max_num_batched_tokens x max(hidden, intermediate)). Allocates device memory, so call it at
  // start-up, before capturing graphs; a call with larger limits reallocates (graphs captured
  // before it would read freed memory: recapture them). Smaller limits keep the buffer.
  // Returns false when the memory is not there. Without it, Linear with 16-bit weights is a
  // reported error.
  bool ReserveLinear(int64_t max_num_tokens, int64_t max_in_features) override;

  void* Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  void* AllocateHost(size_t bytes) override;
  void FreeHost(void* ptr) override;
  void CopyFromHostAsync(void* dst, const void* src, size_t bytes) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  // On a second, non-blocking stream (created with the first batch): each batch waits on the
  // device for an event recorded on stream() before it, and JoinCopies makes stream() wait for
  // one recorded after the last batch; the host never blocks.
  void CopyFromHostBeside(const CopyRegion* regions, int count) override;
  void JoinCopies() override;
  void Memset(void* dst, int value, size_t bytes) override;
  MemoryInfo GetMemoryInfo() const override;

  // Stream capture on a private non-blocking stream (thread-local capture mode), instantiated
  // into a graph replayed on stream(). `record` may call the kernel launchers, CopyOnDevice and
  // Memset; it must not call Allocate, Free, CopyToDevice, CopyToHost or Synchronize (they
  // wait, so capture fails). The scalar fields of every params struct (num_tokens, num_seqs,
  // max_query_len, max_context_len, ...) are frozen into the graph: replay it only for batches
  // with the same scalars; for attention pass the largest max_context_len the graph will serve
  // (it only sets the split count; any context up to the block table's length is right).
  // On failure returns nullptr, logs why to stderr and leaves the backend as it was (no error
  // recorded), so the caller runs the same calls eagerly.
  std::unique_ptr<Graph> Capture(const std::function<void()>& record) override;

  size_t AttentionWorkspaceBytes(const AttentionShape& shape) const override;
  void Embedding(const EmbeddingParams& p) override;
  void RmsNorm(const RmsNormParams& p) override;
  void AddRmsNorm(const AddRmsNormParams& p) override;
  void Linear(const LinearParams& p) override;
  // One x for every p[i]: small batches of 16-bit weights in one launch, x rounded once
  // otherwise.
  void LinearSameInput(const LinearParams* p, int count) override;
  void Rope(const RopeParams& p) override;
  void WriteKv(const KvWriteParams& p) override;
  void PagedAttention(const PagedAttentionParams& p) override;
  void SiluAndMul(const SiluAndMulParams& p) override;
  void GatherRows(const GatherRowsParams& p) override;
  void Argmax(const ArgmaxParams& p) override;
  bool Synchronize() override;

 private:
  CudaBackend(int device, cudaStream_t stream, cudaStream_t capture_stream, cublasContext* cublas,
              void* cublas_workspace, int num_sms)
      : device_(device),
        stream_(stream),
        capture_stream_(capture_stream),
        cublas_(cublas),
        cublas_workspace_(cublas_workspace),
        num_sms_(num_sms) {}

  // Once per process, before any launch: raises the dynamic shared memory limit of the kernels
  // that need more than 48 KiB (dispatch.cu).
  static cudaError_t PrepareKernels();

  // Remembers the first launch or library error for Synchronize() to report.
  void Check(cudaError_t status, const char* what);
  void Fail(const std::string& message);
  // Points cuBLAS at `stream` and at our workspace (cublasSetStream resets the workspace).
  bool BindCublas(cudaStream_t stream);
  // One token, up to 3 weights of one 16-bit type (16-byte aligned, in_features a multiple of
  // 8, up to 8192 output rows together): y = x w^T (+ bias) for each, in one GemvKernel launch
  // (linear.cu). False, having done nothing, for any other call.
  bool SmallBatchLinear(const LinearParams* p, int count);
  // dst = x rounded to dtype (bf16 or f16), n values (dispatch.cu). False for another dtype.
  bool NarrowActivations(const float* x, DType dtype, int64_t n, void* dst);

  const int device_;             // the CUDA device index the backend's memory and streams are on
  cudaStream_t stream_;          // where calls are enqueued (the capture stream while capturing)
  cudaStream_t capture_stream_;  // owned
  cublasContext* cublas_;        // owned
  void* cublas_workspace_;       // owned, kCublasWorkspaceBytes
  int num_sms_;
  void* linear_scratch_ = nullptr;       // owned, linear_scratch_bytes_
  cudaStream_t copy_stream_ = nullptr;   // owned; CopyFromHostBeside's
  cudaEvent_t before_copies_ = nullptr;  // owned; recorded on stream_ before each batch
  cudaEvent_t after_copies_ = nullptr;   // owned; recorded on copy_stream_ by JoinCopies
  bool copies_pending_ = false;          // a batch was issued since the last JoinCopies
  size_t linear_scratch_bytes_ = 0;
  std::string first_error_;
};

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_CUDA_BACKEND_H_
