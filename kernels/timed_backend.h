// TimedBackend: a Backend that runs every call on another backend and adds up the wall time of
// each kind of compute call (Linear, PagedAttention, ...), so a benchmark can say where a step's
// time goes. Each timed call is followed by the inner backend's Synchronize, so asynchronous
// backends (CUDA) are charged to the call that queued the work; that serialises the stream, so
// the total of a timed run is an upper bound of an untimed one. Linear also counts its
// multiply-adds (2 x tokens x in x out FLOPs), for a rate to set against the machine's peak.
// Timing is off until set_enabled(true), and never applies to calls recorded into a graph (nor
// to a graph's replay), so a benchmark can keep one wrapped backend and time some steps only.
//
// Thread-safety: as the inner backend (one caller at a time); the totals are read by the same
// thread between steps.
#ifndef KVSERVE_KERNELS_TIMED_BACKEND_H_
#define KVSERVE_KERNELS_TIMED_BACKEND_H_

#include <array>
#include <cstdint>
#include <memory>

#include "kernels/kernels.h"

namespace kvserve::kernels {

enum class TimedOp {
  kEmbedding,
  kRmsNorm,  // RmsNorm and AddRmsNorm
  kLinear,   // Linear and LinearSameInput
  kRope,
  kWriteKv,
  kAttention,
  kSiluAndMul,
  kGatherRows,
  kArgmax,
  kCopy,  // CopyToDevice, CopyFromHostAsync, CopyToHost, CopyOnDevice, Memset, JoinCopies (last)
};
inline constexpr int kNumTimedOps = static_cast<int>(TimedOp::kCopy) + 1;
const char* TimedOpName(TimedOp op);

struct OpTotals {
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // Linear only
};

class TimedBackend : public Backend {
 public:
  explicit TimedBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}

  void set_enabled(bool enabled) { enabled_ = enabled; }
  const OpTotals& totals(TimedOp op) const { return totals_[static_cast<int>(op)]; }
  double total_seconds() const;
  void Reset() { totals_ = {}; }

  const char* name() const override { return inner_->name(); }
  bool MakeCurrent() override { return inner_->MakeCurrent(); }
  void* Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  void Free(void* ptr) override { inner_->Free(ptr); }
  void* AllocateHost(size_t bytes) override { return inner_->AllocateHost(bytes); }
  void FreeHost(void* ptr) override { inner_->FreeHost(ptr); }
  void CopyFromHostAsync(void* dst, const void* src, size_t bytes) override;
  // Not timed: they run beside the timed calls; the join is timed as a copy.
  void CopyFromHostBeside(const CopyRegion* regions, int count) override {
    inner_->CopyFromHostBeside(regions, count);
  }
  void JoinCopies() override;
  void CopyToDevice(void* dst, const void* src, size_t bytes) override;
  void CopyToHost(void* dst, const void* src, size_t bytes) override;
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override;
  void Memset(void* dst, int value, size_t bytes) override;
  MemoryInfo GetMemoryInfo() const override { return inner_->GetMemoryInfo(); }
  bool host_memory() const override { return inner_->host_memory(); }
  int64_t PackedWeightBytes(DType dtype, int64_t rows, int64_t cols) const override {
    return inner_->PackedWeightBytes(dtype, rows, cols);
  }
  void PackWeight(const void* stored, DType dtype, int64_t rows, int64_t cols,
                  void* packed) override {
    inner_->PackWeight(stored, dtype, rows, cols, packed);
  }
  bool EmbeddingReadsPacked(DType dtype) const override {
    return inner_->EmbeddingReadsPacked(dtype);
  }
  bool ReserveLinear(int64_t max_num_tokens, int64_t max_in_features) override {
    return inner_->ReserveLinear(max_num_tokens, max_in_features);
  }
  std::unique_ptr<Graph> Capture(const std::function<void()>& record) override;
  size_t AttentionWorkspaceBytes(const AttentionShape& shape) const override {
    return inner_->AttentionWorkspaceBytes(shape);
  }

  void Embedding(const EmbeddingParams& p) override;
  void RmsNorm(const RmsNormParams& p) override;
  void AddRmsNorm(const AddRmsNormParams& p) override;
  void Linear(const LinearParams& p) override;
  void LinearSameInput(const LinearParams* p, int count) override;
  void Rope(const RopeParams& p) override;
  void WriteKv(const KvWriteParams& p) override;
  void PagedAttention(const PagedAttentionParams& p) override;
  void SiluAndMul(const SiluAndMulParams& p) override;
  void GatherRows(const GatherRowsParams& p) override;
  void Argmax(const ArgmaxParams& p) override;
  bool Synchronize() override { return inner_->Synchronize(); }

 private:
  // Runs `call` on the inner backend, waits for it, and charges the time to `op`.
  template <typename Call>
  void Timed(TimedOp op, double flops, Call&& call);

  std::shared_ptr<Backend> inner_;
  bool enabled_ = false;
  bool capturing_ = false;
  std::array<OpTotals, kNumTimedOps> totals_{};
};

}  // namespace kvserve::kernels

#endif  // KVSERVE_KERNELS_TIMED_BACKEND_H_
