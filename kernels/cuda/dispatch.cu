// Runtime-to-template dispatch for the CUDA kernels (the only place that maps a runtime head_dim
// or storage type to an instantiation), the launchers that need it (attention, KV write,
// embedding, the activation narrowing of Linear), and the split-KV planning of attention.
#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/prefill_attention.cuh"
#include "kernels/cuda/typed_rows.cuh"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Calls f(T{}) with T the device type of dtype; false when dtype is not f32, bf16 or f16.
template <typename F>
bool WithStorageType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32:
      f(float{});
      return true;
    case DType::kBF16:
      f(__nv_bfloat16{});
      return true;
    case DType::kF16:
      f(__half{});
      return true;
    default:
      return false;
  }
}

// Calls f(std::integral_constant<int, head_dim>{}); false for an unsupported head_dim.
template <typename F>
bool WithHeadDim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64:
      f(std::integral_constant<int, 64>{});
      return true;
    case 80:
      f(std::integral_constant<int, 80>{});
      return true;
    case 96:
      f(std::integral_constant<int, 96>{});
      return true;
    case 128:
      f(std::integral_constant<int, 128>{});
      return true;
    default:
      return false;
  }
}

// Calls f(std::integral_constant<int, n>{}) with n the smallest of 1, 2, 4, 8 >= heads: the
// register arrays of a decode block are sized for n heads.
template <typename F>
void WithMaxHeads(int heads, F&& f) {
  if (heads <= 1) {
    f(std::integral_constant<int, 1>{});
  } else if (heads <= 2) {
    f(std::integral_constant<int, 2>{});
  } else if (heads <= 4) {
    f(std::integral_constant<int, 4>{});
  } else {
    f(std::integral_constant<int, kMaxHeadsPerBlock>{});
  }
}

// The largest divisor of group that is at most kMaxHeadsPerBlock.
int HeadsPerBlock(int group) {
  for (int h = std::min(group, kMaxHeadsPerBlock); h > 1; --h) {
    if (group % h == 0) return h;
  }
  return 1;
}

// Decode blocks wanted per SM: a few waves of resident blocks, so no SM idles long at the end.
constexpr int kDecodeBlocksPerSm = 8;

// KV splits of a decode launch: enough blocks to fill the device, no more than the longest
// context allows (a split covers at least kMinSplitLen keys).
int PlanSplits(int num_seqs, int head_groups, int max_context_len, int num_sms) {
  const int by_context = std::clamp(CeilDiv(max_context_len, kMinSplitLen), 1, kMaxSplits);
  const int by_fill = CeilDiv(int64_t{kDecodeBlocksPerSm} * num_sms,
                              std::max<int64_t>(1, int64_t{num_seqs} * head_groups));
  return std::max(1, std::min(by_context, by_fill));
}

// Bytes of split state per (sequence, head, split).
size_t SplitStateBytes(int head_dim) { return sizeof(float) * (static_cast<size_t>(head_dim) + 2); }

template <int kHeadDim, typename T>
void LaunchAttention(const AttentionLaunch& a, cudaStream_t stream) {
  const PagedAttentionParams& p = a.p;
  const int head_groups = p.num_heads / a.heads_per_block;
  const dim3 decode_grid(p.num_seqs, head_groups, a.num_splits);
  WithMaxHeads(a.heads_per_block, [&](auto heads) {
    PagedDecodeKernel<kHeadDim, T, decltype(heads)::value>
        <<<decode_grid, kDecodeWarps * kWarpSize, 0, stream>>>(a);
  });
  if (a.num_splits > 1) {
    MergeSplitsKernel<kHeadDim><<<dim3(p.num_seqs, p.num_heads), 128, 0, stream>>>(a);
  }
  if (p.max_query_len >= kPrefillMinQueries) {
    const dim3 prefill_grid(p.num_seqs, CeilDiv(p.max_query_len, a.tile_tokens), head_groups);
    PagedPrefillKernel<kHeadDim, T>
        <<<prefill_grid, kPrefillThreads, PrefillSharedBytes(kHeadDim), stream>>>(a);
  }
}

}  // namespace

cudaError_t CudaBackend::PrepareKernels() {
  cudaError_t status = cudaSuccess;
  for (int head_dim : {64, 80, 96, 128}) {
    WithHeadDim(head_dim, [&](auto dim) {
      constexpr int kHeadDim = decltype(dim)::value;
      for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
        WithStorageType(dtype, [&](auto type) {
          using T = decltype(type);
          const cudaError_t s = cudaFuncSetAttribute(
              PagedPrefillKernel<kHeadDim, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
              static_cast<int>(PrefillSharedBytes(kHeadDim)));
          if (status == cudaSuccess) status = s;
        });
      }
    });
  }
  return status;
}

size_t CudaBackend::AttentionWorkspaceBytes(const AttentionShape& shape) const {
  // Split-KV pays off for small batches (decodes): the most split states any batch of up to
  // max_num_seqs sequences is planned (PlanSplits) is what the workspace must hold.
  if (shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0) return 0;
  const int head_groups = shape.num_heads / HeadsPerBlock(shape.num_heads / shape.num_kv_heads);
  int64_t states = 0;
  for (int n = 1; n <= shape.max_num_seqs; ++n) {
    const int splits = PlanSplits(n, head_groups, shape.max_context_len, num_sms_);
    if (splits > 1) states = std::max<int64_t>(states, int64_t{n} * splits);
  }
  return static_cast<size_t>(states) * shape.num_heads * SplitStateBytes(shape.head_dim);
}

void CudaBackend::PagedAttention(const PagedAttentionParams& p) {
  if (p.num_tokens == 0 || p.num_seqs == 0 || p.max_query_len == 0) return;
  const int head_dim = p.cache.head_dim;
  AttentionLaunch a{};
  a.p = p;
  a.q_stride = p.q_token_stride();
  a.group = p.num_heads / p.cache.num_kv_heads;
  a.heads_per_block = HeadsPerBlock(a.group);
  a.tile_tokens = kPrefillRows / a.heads_per_block;

  // Splits: as PlanSplits says, and no more than the workspace holds for this many sequences.
  const int head_groups = p.num_heads / a.heads_per_block;
  const int64_t fits =
      static_cast<int64_t>(p.workspace_bytes / (static_cast<size_t>(p.num_seqs) * p.num_heads *
                                                SplitStateBytes(head_dim)));
  a.num_splits = static_cast<int>(std::max<int64_t>(
      1,
      std::min<int64_t>(PlanSplits(p.num_seqs, head_groups, p.max_context_len, num_sms_), fits)));
  if (a.num_splits > 1) {
    const int64_t states = static_cast<int64_t>(p.num_seqs) * p.num_heads * a.num_splits;
    a.split_acc = static_cast<float*>(p.workspace);  // [states, head_dim]
    a.split_max = a.split_acc + states * head_dim;   // [states]
    a.split_sum = a.split_max + states;              // [states]
  }

  bool type_ok = true;
  const bool dim_ok = WithHeadDim(head_dim, [&](auto dim) {
    type_ok = WithStorageType(p.cache.dtype, [&](auto type) {
      LaunchAttention<decltype(dim)::value, decltype(type)>(a, stream_);
    });
  });
  if (!dim_ok) {
    Fail(std::string("PagedAttention: head_dim ") + std::to_string(head_dim) +
         " is not one of 64, 80, 96, 128");
  } else if (!type_ok) {
    Fail(std::string("PagedAttention: KV cache type ") + DTypeName(p.cache.dtype) +
         " is not supported by the CUDA backend (f32, bf16, f16)");
  }
  Check(cudaGetLastError(), "PagedAttention");
}

void CudaBackend::WriteKv(const KvWriteParams& p) {
  if (p.num_tokens == 0) return;
  const int64_t k_stride = p.k_token_stride();
  const int64_t v_stride = p.v_token_stride();
  const bool ok = WithStorageType(p.cache.dtype, [&](auto type) {
    WriteKvKernel<decltype(type)><<<p.num_tokens, kThreads, 0, stream_>>>(p, k_stride, v_stride);
  });
  if (!ok) {
    Fail(std::string("WriteKv: KV cache type ") + DTypeName(p.cache.dtype) +
         " is not supported by the CUDA backend (f32, bf16, f16)");
  }
  Check(cudaGetLastError(), "WriteKv");
}

void CudaBackend::Embedding(const EmbeddingParams& p) {
  if (p.num_tokens == 0) return;
  const bool ok = WithStorageType(p.table_dtype, [&](auto type) {
    EmbeddingKernel<decltype(type)><<<p.num_tokens, kThreads, 0, stream_>>>(p);
  });
  if (!ok) {
    Fail(std::string("Embedding: table type ") + DTypeName(p.table_dtype) +
         " is not supported by the CUDA backend (f32, bf16, f16)");
  }
  Check(cudaGetLastError(), "Embedding");
}

bool CudaBackend::NarrowActivations(const float* x, DType dtype, int64_t n, void* dst) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) {
    Fail(std::string("Linear: cannot round activations to ") + DTypeName(dtype));
    return false;
  }
  if (n == 0) return true;
  const int blocks = static_cast<int>(std::min<int64_t>(CeilDiv(n, kThreads), 4096));
  WithStorageType(dtype, [&](auto type) {
    using T = decltype(type);
    NarrowKernel<T><<<blocks, kThreads, 0, stream_>>>(x, static_cast<T*>(dst), n);
  });
  Check(cudaGetLastError(), "Linear: rounding activations");
  return true;
}

}  // namespace kvserve::kernels::cuda
