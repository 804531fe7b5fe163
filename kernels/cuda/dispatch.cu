// Runtime-to-template dispatch for the CUDA kernels with compile-time sizes (the only place that
// maps a runtime head_dim to an instantiation), and the split-KV planning of paged attention.
#include <algorithm>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/paged_attention.cuh"

namespace kvserve::kernels::cuda {
namespace {

// A split covers at least this many keys: shorter splits cost more in merging than they win.
constexpr int kMinSplitLen = 256;
constexpr int kMaxSplits = 64;

int MaxSplits(int max_context_len) {
  return std::clamp(CeilDiv(max_context_len, kMinSplitLen), 1, kMaxSplits);
}

// Bytes of split state per (token, head, split).
size_t SplitStateBytes(int head_dim) { return sizeof(float) * (static_cast<size_t>(head_dim) + 2); }

// The largest divisor of group that is at most kMaxHeadsPerBlock.
int HeadsPerBlock(int group) {
  for (int h = std::min(group, kMaxHeadsPerBlock); h > 1; --h) {
    if (group % h == 0) return h;
  }
  return 1;
}

template <int kHeadDim>
void Launch(const AttentionLaunch& a, cudaStream_t stream) {
  const dim3 grid(a.p.num_tokens, a.p.num_heads / a.heads_per_block, a.num_splits);
  PagedAttentionKernel<kHeadDim><<<grid, kAttentionWarps * kWarpSize, 0, stream>>>(a);
  if (a.num_splits > 1) {
    MergeSplitsKernel<kHeadDim><<<dim3(a.p.num_tokens, a.p.num_heads), 128, 0, stream>>>(a);
  }
}

}  // namespace

size_t CudaBackend::AttentionWorkspaceBytes(const AttentionShape& shape) const {
  // Split-KV pays off for small batches (decodes); plan for max_num_seqs tokens at the most
  // splits any context needs. Bigger batches get fewer splits (see PagedAttention).
  const int splits = MaxSplits(shape.max_context_len);
  if (splits == 1) return 0;
  return static_cast<size_t>(shape.max_num_seqs) * shape.num_heads * splits *
         SplitStateBytes(shape.head_dim);
}

void CudaBackend::PagedAttention(const PagedAttentionParams& p) {
  if (p.num_tokens == 0 || p.num_seqs == 0) return;
  const int head_dim = p.cache.head_dim;
  AttentionLaunch a{};
  a.p = p;
  a.q_stride = p.q_stride ? p.q_stride : static_cast<int64_t>(p.num_heads) * head_dim;
  a.group = p.num_heads / p.cache.num_kv_heads;
  a.heads_per_block = HeadsPerBlock(a.group);

  // Splits: as many as the longest context allows, no more than needed to give every SM two
  // blocks, and no more than the workspace holds for this many tokens.
  const int64_t blocks_per_split =
      static_cast<int64_t>(p.num_tokens) * (p.num_heads / a.heads_per_block);
  const int64_t fill = CeilDiv(2 * static_cast<int64_t>(num_sms_), blocks_per_split);
  const int64_t fits =
      static_cast<int64_t>(p.workspace_bytes / (static_cast<size_t>(p.num_tokens) * p.num_heads *
                                                SplitStateBytes(head_dim)));
  a.num_splits = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>({MaxSplits(p.max_context_len), fill, fits})));
  a.split_len = CeilDiv(std::max(p.max_context_len, 1), a.num_splits);
  if (a.num_splits > 1) {
    const int64_t states = static_cast<int64_t>(p.num_tokens) * p.num_heads * a.num_splits;
    a.split_acc = static_cast<float*>(p.workspace);  // [states, head_dim]
    a.split_max = a.split_acc + states * head_dim;   // [states]
    a.split_sum = a.split_max + states;              // [states]
  }

  switch (head_dim) {
    case 64:
      Launch<64>(a, stream_);
      break;
    case 80:
      Launch<80>(a, stream_);
      break;
    case 96:
      Launch<96>(a, stream_);
      break;
    case 128:
      Launch<128>(a, stream_);
      break;
    default:
      Check(cudaErrorInvalidValue, "PagedAttention: head_dim not one of 64, 80, 96, 128");
      return;
  }
  Check(cudaGetLastError(), "PagedAttention");
}

}  // namespace kvserve::kernels::cuda
