#include "kernels/timed_backend.h"

#include <chrono>

namespace kvserve::kernels {

const char* TimedOpName(TimedOp op) {
  switch (op) {
    case TimedOp::kEmbedding:
      return "embedding";
    case TimedOp::kRmsNorm:
      return "rms_norm";
    case TimedOp::kLinear:
      return "linear";
    case TimedOp::kRope:
      return "rope";
    case TimedOp::kWriteKv:
      return "write_kv";
    case TimedOp::kAttention:
      return "attention";
    case TimedOp::kSiluAndMul:
      return "silu_and_mul";
    case TimedOp::kGatherRows:
      return "gather_rows";
    case TimedOp::kArgmax:
      return "argmax";
    case TimedOp::kCopy:
      return "copy";
  }
  return "?";
}

double TimedBackend::total_seconds() const {
  double total = 0;
  for (const OpTotals& op : totals_) total += op.seconds;
  return total;
}

std::unique_ptr<Graph> TimedBackend::Capture(const std::function<void()>& record) {
  capturing_ = true;
  std::unique_ptr<Graph> graph = inner_->Capture(record);
  capturing_ = false;
  return graph;
}

template <typename Call>
void TimedBackend::Timed(TimedOp op, double flops, Call&& call) {
  if (!enabled_ || capturing_) return call();
  const auto start = std::chrono::steady_clock::now();
  call();
  inner_->Synchronize();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  OpTotals& totals = totals_[static_cast<int>(op)];
  ++totals.calls;
  totals.seconds += elapsed.count();
  totals.flops += flops;
}

namespace {

double LinearFlops(const LinearParams& p) {
  return 2.0 * p.num_tokens * p.in_features * p.out_features;
}

}  // namespace

void TimedBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  Timed(TimedOp::kCopy, 0, [&] { inner_->CopyToDevice(dst, src, bytes); });
}
void TimedBackend::CopyFromHostAsync(void* dst, const void* src, size_t bytes) {
  Timed(TimedOp::kCopy, 0, [&] { inner_->CopyFromHostAsync(dst, src, bytes); });
}
void TimedBackend::JoinCopies() {
  Timed(TimedOp::kCopy, 0, [&] { inner_->JoinCopies(); });
}
void TimedBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  Timed(TimedOp::kCopy, 0, [&] { inner_->CopyToHost(dst, src, bytes); });
}
void TimedBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  Timed(TimedOp::kCopy, 0, [&] { inner_->CopyOnDevice(dst, src, bytes); });
}
void TimedBackend::Memset(void* dst, int value, size_t bytes) {
  Timed(TimedOp::kCopy, 0, [&] { inner_->Memset(dst, value, bytes); });
}
void TimedBackend::Embedding(const EmbeddingParams& p) {
  Timed(TimedOp::kEmbedding, 0, [&] { inner_->Embedding(p); });
}
void TimedBackend::RmsNorm(const RmsNormParams& p) {
  Timed(TimedOp::kRmsNorm, 0, [&] { inner_->RmsNorm(p); });
}
void TimedBackend::AddRmsNorm(const AddRmsNormParams& p) {
  Timed(TimedOp::kRmsNorm, 0, [&] { inner_->AddRmsNorm(p); });
}
void TimedBackend::Linear(const LinearParams& p) {
  Timed(TimedOp::kLinear, LinearFlops(p), [&] { inner_->Linear(p); });
}
void TimedBackend::LinearSameInput(const LinearParams* p, int count) {
  double flops = 0;
  for (int i = 0; i < count; ++i) flops += LinearFlops(p[i]);
  Timed(TimedOp::kLinear, flops, [&] { inner_->LinearSameInput(p, count); });
}
void TimedBackend::Rope(const RopeParams& p) {
  Timed(TimedOp::kRope, 0, [&] { inner_->Rope(p); });
}
void TimedBackend::WriteKv(const KvWriteParams& p) {
  Timed(TimedOp::kWriteKv, 0, [&] { inner_->WriteKv(p); });
}
void TimedBackend::PagedAttention(const PagedAttentionParams& p) {
  Timed(TimedOp::kAttention, 0, [&] { inner_->PagedAttention(p); });
}
void TimedBackend::SiluAndMul(const SiluAndMulParams& p) {
  Timed(TimedOp::kSiluAndMul, 0, [&] { inner_->SiluAndMul(p); });
}
void TimedBackend::GatherRows(const GatherRowsParams& p) {
  Timed(TimedOp::kGatherRows, 0, [&] { inner_->GatherRows(p); });
}
void TimedBackend::Argmax(const ArgmaxParams& p) {
  Timed(TimedOp::kArgmax, 0, [&] { inner_->Argmax(p); });
}

}  // namespace kvserve::kernels
