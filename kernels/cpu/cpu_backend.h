// The CPU implementation of the kernel interface (kernels/kernels.h), on host pointers.
//
// Each kernel is a plain function in kvserve::kernels::cpu, written to be read like llama2.c;
// CpuBackend binds them to a Backend and owns the ThreadPool the attention runs on.
// Linear on f32 weights uses OpenBLAS (SGEMV / SGEMM with its own threads, OPENBLAS_NUM_THREADS)
// and our small-batch kernel; on bf16 / f16 weights (half_linear.h) and GGUF block types
// (quant_linear.h: activations quantized to int8 per 32-element block, integer dot products) it
// computes from the weights as stored, with scalar, AVX2 or AVX-512 kernels chosen at run time
// (cpu_isa.h; KVSERVE_CPU_ISA caps the choice), its output rows split over the pool.
// Paged attention is split into (sequence, KV head, query tile) items run on the pool (created
// once with the backend, never per call). The elementwise kernels run on the calling thread for
// a few tokens (a decode step) and split their tokens over the pool for more (a prefill, where
// on one thread they took a quarter of the step).
// Thread-safety: as for Backend, one call at a time.
#ifndef KVSERVE_KERNELS_CPU_CPU_BACKEND_H_
#define KVSERVE_KERNELS_CPU_CPU_BACKEND_H_

#include <cstddef>
#include <vector>

#include "base/task_thread.h"
#include "kernels/cpu/dense_panels.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/kernels.h"

namespace kvserve::kernels::cpu {

// dst[i] = src[i] as fp32 for n values of dtype (any type; n a whole number of blocks).
void DequantizeRow(const void* src, DType dtype, int64_t n, float* dst);
// dst = src rounded to dtype (f32, bf16 or f16).
void NarrowRow(const float* src, DType dtype, int64_t n, void* dst);

void Embedding(const EmbeddingParams& p);
void RmsNorm(const RmsNormParams& p);
void AddRmsNorm(const AddRmsNormParams& p);
// Output rows are split over `pool` when it is given: f32 weights for small batches (2..16
// tokens), every other weight type always. REQUIRES: in_features a whole number of blocks.
void Linear(const LinearParams& p, ThreadPool* pool = nullptr);
// Backend::LinearSameInput: GGUF block types run as one loop over the rows of all count
// products, with x quantized once; other types one Linear each.
void LinearSameInput(const LinearParams* p, int count, ThreadPool* pool = nullptr);
void Rope(const RopeParams& p);
// Rope in two parts: the cosines and sines of every (token, pair) angle, [num_tokens, half] each,
// from the pairs' inverse frequencies (ComputeRopeInvFreq, [half]), then the rotation of p's
// tokens by them. Rope is the two for one token at a time.
void RopeTable(const float* inv_freq, int half, const int32_t* positions, int32_t num_tokens,
               float* cos, float* sin);
void RopeFromTable(const RopeParams& p, const float* cos, const float* sin);
void WriteKv(const KvWriteParams& p);
void SiluAndMul(const SiluAndMulParams& p);
void GatherRows(const GatherRowsParams& p);
void Argmax(const ArgmaxParams& p);

// Bytes of scratch PagedAttention needs on a pool of num_threads threads (per-thread tiles of
// scores and accumulators; independent of context length, which is streamed block by block).
size_t AttentionWorkspaceBytes(const AttentionShape& shape, int num_threads);

// Runs on pool (nullptr: on the calling thread only). REQUIRES: p.workspace_bytes >=
// AttentionWorkspaceBytes(shape, pool ? pool->num_threads() : 1) for a shape covering p.
void PagedAttention(const PagedAttentionParams& p, ThreadPool* pool);

class CpuBackend : public Backend {
 public:
  // num_threads: threads for attention and the linear layers we run ourselves, caller included;
  // <= 0 means all cores. OpenBLAS keeps its own threads for f32 SGEMV/SGEMM. pack_weights:
  // whether PackedWeightBytes offers the packed forms (quant_linear.h, dense_panels.h) where it
  // has a kernel for them.
  explicit CpuBackend(int num_threads = 0, bool pack_weights = true)
      : pool_(num_threads), pack_weights_(pack_weights) {}

  const char* name() const override { return "cpu"; }
  // Host memory: 64-byte aligned allocations; copies are memcpy; MemoryInfo is the container's
  // memory limit (cgroup) or the machine's RAM, and what is available under it.
  void* Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  // On a thread of their own (copies_), in order: the calling thread computes meanwhile. With as
  // many busy compute threads as cores the copies time-share a core with them; what that buys
  // is that no step waits for a copy it does not read, not free bandwidth.
  void CopyFromHostBeside(const CopyRegion* regions, int count) override;
  void JoinCopies() override { copies_.Join(); }
  void Memset(void* dst, int value, size_t bytes) override;
  MemoryInfo GetMemoryInfo() const override;
  bool host_memory() const override { return true; }
  // Where the AVX2 or AVX-512 kernels run and pack_weights is set: Q8_0, Q4_0 and Q4_1 matrices
  // in 16-row tiles (quant_linear.h), f32 ones in 8-row panels (dense_panels.h), and bf16 ones in
  // panels on AVX2 (an AVX-512 machine reads bf16 rows as stored).
  int64_t PackedWeightBytes(DType dtype, int64_t rows, int64_t cols) const override;
  void PackWeight(const void* stored, DType dtype, int64_t rows, int64_t cols,
                  void* packed) override;
  // f32 and bf16 tables in panels (dense_panels.h): a row is gathered from its panel.
  bool EmbeddingReadsPacked(DType dtype) const override {
    return PackedWeightBytes(dtype, 1, 1) > 0 && HasDensePanels(dtype);
  }
  int num_threads() const { return pool_.num_threads(); }
  ThreadPool& pool() { return pool_; }

  size_t AttentionWorkspaceBytes(const AttentionShape& shape) const override {
    return cpu::AttentionWorkspaceBytes(shape, pool_.num_threads());
  }
  void Embedding(const EmbeddingParams& p) override { cpu::Embedding(p); }
  // These five split their tokens over the pool when a step has enough of them (a prefill).
  void RmsNorm(const RmsNormParams& p) override;
  void AddRmsNorm(const AddRmsNormParams& p) override;
  void Linear(const LinearParams& p) override { cpu::Linear(p, &pool_); }
  void LinearSameInput(const LinearParams* p, int count) override {
    cpu::LinearSameInput(p, count, &pool_);
  }
  void Rope(const RopeParams& p) override;
  void WriteKv(const KvWriteParams& p) override;
  void PagedAttention(const PagedAttentionParams& p) override { cpu::PagedAttention(p, &pool_); }
  void SiluAndMul(const SiluAndMulParams& p) override;
  void GatherRows(const GatherRowsParams& p) override { cpu::GatherRows(p); }
  void Argmax(const ArgmaxParams& p) override { cpu::Argmax(p); }
  // Compute runs on the calling thread: only the copy thread can still be busy.
  bool Synchronize() override {
    copies_.Join();
    return true;
  }

 private:
  ThreadPool pool_;
  TaskThread copies_;  // CopyFromHostBeside's
  bool pack_weights_;
  // Rope's table for the positions and inverse frequencies it last saw (all the angles depend
  // on). Every layer of a step rotates at the same positions, so a step computes the table once,
  // not once per layer (the sines and cosines, in double, were ~4% of a prefill's time when every
  // layer computed them).
  std::vector<int32_t> rope_positions_;
  std::vector<float> rope_inv_freq_;
  std::vector<float> rope_cos_;
  std::vector<float> rope_sin_;
};

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_CPU_BACKEND_H_
