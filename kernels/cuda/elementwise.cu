// CUDA kernels on fp32 rows that touch each element once: norms, RoPE, SiLU-and-mul, gather,
// argmax; and their CudaBackend launchers (the typed ones, embedding and KV write, are in
// typed_rows.cuh and launched from dispatch.cu). One block per token (or row) unless noted.
#include <algorithm>
#include <cfloat>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRopePairs = 256;  // head_dim <= 512

// out = x * rsqrt(mean(x^2) + eps) * weight for one row per block. If residual is not null,
// residual += x first and the sum is normalised.
__global__ void RmsNormKernel(const float* x /* [T, hidden] */, float* residual /* [T, hidden] */,
                              const float* weight /* [hidden] */, float* out /* [T, hidden] */,
                              int hidden, float eps) {
  __shared__ float shared[32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * hidden;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    float v = x[row + i];
    if (residual != nullptr) {
      v += residual[row + i];
      residual[row + i] = v;
    }
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(BlockSum(sum_sq, shared) / hidden + eps);
  const float* src = residual != nullptr ? residual : x;
  // Each thread re-reads only the elements it wrote above, so no barrier is needed.
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    out[row + i] = src[row + i] * inv_rms * weight[i];
  }
}

struct RopeFreqs {
  float inv_freq[kMaxRopePairs];  // [head_dim / 2]
};

// Rotates the pairs of q and k of one token per block; the angle is computed in double so
// long positions agree with the CPU backend.
__global__ void RopeKernel(RopeParams p, int64_t q_stride, int64_t k_stride, RopeFreqs freqs) {
  const int64_t t = blockIdx.x;
  const int head_dim = p.config.head_dim;
  const int half = head_dim / 2;
  const int num_k_heads = p.k != nullptr ? p.num_kv_heads : 0;
  const int total_pairs = (p.num_heads + num_k_heads) * half;
  const double pos = p.positions[t];
  for (int idx = threadIdx.x; idx < total_pairs; idx += blockDim.x) {
    const int head = idx / half;
    const int i = idx % half;
    float* x = head < p.num_heads
                   ? p.q + t * q_stride + static_cast<int64_t>(head) * head_dim
                   : p.k + t * k_stride + static_cast<int64_t>(head - p.num_heads) * head_dim;
    const int a = p.config.style == RopeStyle::kInterleaved ? 2 * i : i;
    const int b = p.config.style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
    double s, c;
    sincos(pos * static_cast<double>(freqs.inv_freq[i]), &s, &c);
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * static_cast<float>(c) - x1 * static_cast<float>(s);
    x[b] = x0 * static_cast<float>(s) + x1 * static_cast<float>(c);
  }
}

__global__ void SiluAndMulKernel(SiluAndMulParams p, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = p.gate[i];
    p.out[i] = g / (1.0f + expf(-g)) * p.up[i];
  }
}

__global__ void GatherRowsKernel(GatherRowsParams p) {
  const float* src = p.src + static_cast<int64_t>(p.rows[blockIdx.x]) * p.cols;  // [cols]
  float* dst = p.dst + static_cast<int64_t>(blockIdx.x) * p.cols;                // [cols]
  for (int i = threadIdx.x; i < p.cols; i += blockDim.x) dst[i] = src[i];
}

// (value, id) max with ties to the lower id, so the result matches the CPU argmax.
__device__ __forceinline__ bool Better(float v, int id, float best_v, int best_id) {
  return v > best_v || (v == best_v && id < best_id);
}

__global__ void ArgmaxKernel(ArgmaxParams p) {
  __shared__ float shared_v[kThreads / kWarpSize];
  __shared__ int shared_id[kThreads / kWarpSize];
  const float* logits = p.logits + static_cast<int64_t>(blockIdx.x) * p.vocab;  // [vocab]
  float best_v = -INFINITY;  // with best_id = vocab, any logit (-inf too) wins over it
  int best_id = p.vocab;
  for (int v = threadIdx.x; v < p.vocab; v += blockDim.x) {
    if (Better(logits[v], v, best_v, best_id)) {
      best_v = logits[v];
      best_id = v;
    }
  }
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    const float other_v = __shfl_xor_sync(0xffffffffu, best_v, offset);
    const int other_id = __shfl_xor_sync(0xffffffffu, best_id, offset);
    if (Better(other_v, other_id, best_v, best_id)) {
      best_v = other_v;
      best_id = other_id;
    }
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) {
    shared_v[warp] = best_v;
    shared_id[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / kWarpSize; ++w) {
      if (Better(shared_v[w], shared_id[w], best_v, best_id)) {
        best_v = shared_v[w];
        best_id = shared_id[w];
      }
    }
    p.ids[blockIdx.x] = best_id;
  }
}

}  // namespace

void CudaBackend::RmsNorm(const RmsNormParams& p) {
  if (p.num_tokens == 0) return;
  RmsNormKernel<<<p.num_tokens, kThreads, 0, stream_>>>(p.x, nullptr, p.weight, p.out, p.hidden,
                                                        p.eps);
  Check(cudaGetLastError(), "RmsNorm");
}

void CudaBackend::AddRmsNorm(const AddRmsNormParams& p) {
  if (p.num_tokens == 0) return;
  RmsNormKernel<<<p.num_tokens, kThreads, 0, stream_>>>(p.x, p.residual, p.weight, p.out, p.hidden,
                                                        p.eps);
  Check(cudaGetLastError(), "AddRmsNorm");
}

void CudaBackend::Rope(const RopeParams& p) {
  if (p.num_tokens == 0) return;
  if (p.config.head_dim / 2 > kMaxRopePairs) {
    Check(cudaErrorInvalidValue, "Rope: head_dim > 512");
    return;
  }
  RopeFreqs freqs;
  ComputeRopeInvFreq(p.config, freqs.inv_freq);
  RopeKernel<<<p.num_tokens, kThreads, 0, stream_>>>(p, p.q_token_stride(), p.k_token_stride(),
                                                     freqs);
  Check(cudaGetLastError(), "Rope");
}

void CudaBackend::SiluAndMul(const SiluAndMulParams& p) {
  const int64_t n = static_cast<int64_t>(p.num_tokens) * p.intermediate;
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>(CeilDiv(n, kThreads), 65535));
  SiluAndMulKernel<<<blocks, kThreads, 0, stream_>>>(p, n);
  Check(cudaGetLastError(), "SiluAndMul");
}

void CudaBackend::GatherRows(const GatherRowsParams& p) {
  if (p.num_rows == 0) return;
  GatherRowsKernel<<<p.num_rows, kThreads, 0, stream_>>>(p);
  Check(cudaGetLastError(), "GatherRows");
}

void CudaBackend::Argmax(const ArgmaxParams& p) {
  if (p.num_rows == 0) return;
  ArgmaxKernel<<<p.num_rows, kThreads, 0, stream_>>>(p);
  Check(cudaGetLastError(), "Argmax");
}

}  // namespace kvserve::kernels::cuda
