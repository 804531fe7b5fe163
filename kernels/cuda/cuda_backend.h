// CudaBackend: the kernel interface (kernels/kernels.h) on device pointers, asynchronous on one
// CUDA stream. Built only when KVSERVE_WITH_CUDA is defined.
//
// Every launcher only enqueues work: nothing is allocated, nothing is copied to the host and
// nothing waits, so a decode step can be captured in a CUDA graph. Scratch comes from the
// caller (PagedAttentionParams::workspace, sized by AttentionWorkspaceBytes). Errors are sticky
// in the stream; Synchronize() waits and reports them. Kernels with compile-time head sizes are
// dispatched from runtime values in one place (kernels/cuda/dispatch.cu): head_dim 64, 80, 96,
// 128; any other head_dim makes PagedAttention a reported error.
//
// Attention: one thread block per (query token, group of query heads sharing a KV head,
// KV split). Decode tokens of long contexts are split over several blocks (split-KV) whose
// partial softmax states are merged by a second kernel; prefill tokens use the same kernel, one
// token per block, causal over the paged cache.
// Linear: cuBLAS SGEMM in fp32 (no TF32), so results track the CPU backend closely.
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
  // On the current device, enqueueing on stream (nullptr: the legacy default stream). Returns
  // nullptr and sets *error when there is no usable device or cuBLAS cannot start.
  static std::unique_ptr<CudaBackend> Create(cudaStream_t stream, std::string* error);
  ~CudaBackend() override;

  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  cudaStream_t stream() const { return stream_; }

  void* Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  void Memset(void* dst, int value, size_t bytes) override;
  MemoryInfo GetMemoryInfo() const override;

  size_t AttentionWorkspaceBytes(const AttentionShape& shape) const override;
  void Embedding(const EmbeddingParams& p) override;
  void RmsNorm(const RmsNormParams& p) override;
  void AddRmsNorm(const AddRmsNormParams& p) override;
  void Linear(const LinearParams& p) override;
  void Rope(const RopeParams& p) override;
  void WriteKv(const KvWriteParams& p) override;
  void PagedAttention(const PagedAttentionParams& p) override;
  void SiluAndMul(const SiluAndMulParams& p) override;
  void GatherRows(const GatherRowsParams& p) override;
  void Argmax(const ArgmaxParams& p) override;
  bool Synchronize() override;

 private:
  CudaBackend(cudaStream_t stream, cublasContext* cublas, int num_sms)
      : stream_(stream), cublas_(cublas), num_sms_(num_sms) {}

  // Remembers the first launch or library error for Synchronize() to report.
  void Check(cudaError_t status, const char* what);

  cudaStream_t stream_;
  cublasContext* cublas_;
  int num_sms_;
  std::string first_error_;
};

}  // namespace kvserve::kernels::cuda

#endif  // KVSERVE_KERNELS_CUDA_CUDA_BACKEND_H_
