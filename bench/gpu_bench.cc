// gpu_bench: one pass of the CUDA backend's figures on the current device, as plain text.
//   (a) HBM read bandwidth: a streaming read of 4 GiB (bench/gpu_bench_read.cu);
//   (b) paged decode attention, Llama-3-8B shape (32 query heads, 8 KV heads, head_dim 128,
//       block 16), bf16 and f32 KV, batch 1 / 8 / 64 x context 1k / 4k / 16k: time per call,
//       K+V bytes read per second and that as a fraction of (a);
//   (c) paged prefill attention, same shape, one sequence of 512 / 2048 / 8192 new tokens
//       (bf16 KV): time and TFLOP/s (4 * heads * head_dim * n(n+1)/2 flops);
//   (d) Linear with bf16 weights at M = 1..64 tokens for Llama-3-8B's projections: time,
//       TFLOP/s, weight bytes read per second and that as a fraction of (a). Several copies of
//       each weight rotate so that no call finds its weight in L2.
// Timing: CUDA events around `kIterations` calls after `kWarmup` calls. Run time on an H200:
// well under a minute. Without a device it prints why and exits 0.
//   build-gpu/bench/gpu_bench
#include "bench/gpu_bench.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::bench {
namespace {

using kernels::DType;
using kernels::cuda::CudaBackend;

constexpr int kWarmup = 3;
constexpr int kIterations = 20;
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlockSize = 16;

// Microseconds per call of f, timed with events on the legacy stream.
template <typename F>
double TimeUs(F&& f) {
  for (int i = 0; i < kWarmup; ++i) f();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start);
  for (int i = 0; i < kIterations; ++i) f();
  cudaEventRecord(stop);
  cudaEventSynchronize(stop);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms * 1e3 / kIterations;
}

// A device buffer freed on scope exit; nullptr when allocation failed.
struct DeviceMemory {
  DeviceMemory(CudaBackend& backend, size_t bytes)
      : backend(backend), ptr(backend.Allocate(bytes)) {}
  ~DeviceMemory() { backend.Free(ptr); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  CudaBackend& backend;
  void* ptr;
};

template <typename T>
void Upload(CudaBackend& backend, const DeviceMemory& dst, const std::vector<T>& src) {
  backend.CopyToDevice(dst.ptr, src.data(), src.size() * sizeof(T));
}

// Attention over seqs sequences of context tokens each with `query` new tokens each (1: decode).
// Returns microseconds per call, or a negative value on an error (printed).
double TimeAttention(CudaBackend& backend, const DeviceMemory& k_cache, const DeviceMemory& v_cache,
                     DType dtype, int seqs, int context, int query, std::mt19937& rng) {
  const int blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
  const int num_blocks = seqs * blocks_per_seq + 1;
  const int tokens = seqs * query;
  std::vector<int32_t> pool(num_blocks - 1);
  std::iota(pool.begin(), pool.end(), 1);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> query_start(seqs + 1), context_lens(seqs, context);
  for (int s = 0; s <= seqs; ++s) query_start[s] = s * query;
  DeviceMemory d_tables(backend, pool.size() * sizeof(int32_t));
  DeviceMemory d_query_start(backend, query_start.size() * sizeof(int32_t));
  DeviceMemory d_context(backend, context_lens.size() * sizeof(int32_t));
  DeviceMemory d_q(backend, static_cast<size_t>(tokens) * kHeads * kHeadDim * sizeof(float));
  DeviceMemory d_out(backend, static_cast<size_t>(tokens) * kHeads * kHeadDim * sizeof(float));
  const kernels::AttentionShape shape{tokens,   seqs,     context,   kHeads,
                                      kKvHeads, kHeadDim, kBlockSize};
  const size_t workspace_bytes = backend.AttentionWorkspaceBytes(shape);
  DeviceMemory workspace(backend, std::max<size_t>(workspace_bytes, 1));
  if (!d_tables.ptr || !d_query_start.ptr || !d_context.ptr || !d_q.ptr || !d_out.ptr ||
      !workspace.ptr) {
    std::printf("  out of device memory\n");
    return -1.0;
  }
  Upload(backend, d_tables, pool);
  Upload(backend, d_query_start, query_start);
  Upload(backend, d_context, context_lens);
  backend.Memset(d_q.ptr, 0x3C, static_cast<size_t>(tokens) * kHeads * kHeadDim * sizeof(float));

  const kernels::PagedAttentionParams p = kernels::testing::MakeAttentionParams(
      {d_q.as<float>(), d_query_start.as<int32_t>(), d_context.as<int32_t>(),
       d_tables.as<int32_t>()},
      {.num_tokens = tokens,
       .num_seqs = seqs,
       .num_heads = kHeads,
       .max_blocks_per_seq = blocks_per_seq,
       .max_query_len = query,
       .max_context_len = context},
      {k_cache.ptr, v_cache.ptr, num_blocks, kKvHeads, kBlockSize, kHeadDim, dtype},
      d_out.as<float>(), workspace.ptr, workspace_bytes);
  const double us = TimeUs([&] { backend.PagedAttention(p); });
  if (!backend.Synchronize()) return -1.0;
  return us;
}

bool DecodeAttention(CudaBackend& backend, double hbm_bytes_per_s, std::mt19937& rng) {
  const int max_seqs = 64, max_context = 16384;
  // Room for the largest case in f32; bf16 cases use the front half.
  const size_t cache_bytes = (static_cast<size_t>(max_seqs) * (max_context / kBlockSize) + 1) *
                             kKvHeads * kBlockSize * kHeadDim * sizeof(float);
  DeviceMemory k_cache(backend, cache_bytes), v_cache(backend, cache_bytes);
  if (!k_cache.ptr || !v_cache.ptr) {
    std::printf("decode attention: cannot allocate 2 x %.1f GiB of KV cache\n",
                cache_bytes / 1073741824.0);
    return false;
  }
  backend.Memset(k_cache.ptr, 0x3C, cache_bytes);  // small finite values in every type
  backend.Memset(v_cache.ptr, 0x3C, cache_bytes);
  std::printf("\n(b) paged decode attention: %d heads, %d KV heads, head_dim %d, block %d\n",
              kHeads, kKvHeads, kHeadDim, kBlockSize);
  std::printf("%-5s %6s %8s %12s %12s %10s\n", "kv", "batch", "context", "time_us", "kv_GB/s",
              "of_hbm");
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (int seqs : {1, 8, 64}) {
      for (int context : {1024, 4096, 16384}) {
        const double us = TimeAttention(backend, k_cache, v_cache, dtype, seqs, context, 1, rng);
        if (us < 0) return false;
        const double bytes =
            2.0 * seqs * context * kKvHeads * kHeadDim * kernels::GetDTypeInfo(dtype).block_bytes;
        const double rate = bytes / (us * 1e-6);
        std::printf("%-5s %6d %8d %12.1f %12.1f %10.3f\n", kernels::DTypeName(dtype), seqs, context,
                    us, rate / 1e9, rate / hbm_bytes_per_s);
      }
    }
  }
  std::printf("\n(c) paged prefill attention: one sequence, n new tokens, bf16 KV\n");
  std::printf("%-5s %8s %12s %10s\n", "kv", "n", "time_us", "TFLOP/s");
  for (int n : {512, 2048, 8192}) {
    const double us = TimeAttention(backend, k_cache, v_cache, DType::kBF16, 1, n, n, rng);
    if (us < 0) return false;
    const double flops = 4.0 * kHeads * kHeadDim * (static_cast<double>(n) * (n + 1) / 2);
    std::printf("%-5s %8d %12.1f %10.2f\n", "bf16", n, us, flops / (us * 1e-6) / 1e12);
  }
  return true;
}

struct LinearShape {
  const char* name;
  int in;
  int out;
};

bool BF16Linear(CudaBackend& backend, double hbm_bytes_per_s) {
  const LinearShape shapes[] = {{"qkv_proj", 4096, 6144},
                                {"o_proj", 4096, 4096},
                                {"gate_proj", 4096, 14336},
                                {"down_proj", 14336, 4096},
                                {"lm_head", 4096, 128256}};
  const int max_m = 64;
  if (!backend.ReserveLinear(max_m, 14336)) {
    std::printf("Linear: cannot reserve the activation scratch\n");
    return false;
  }
  std::printf("\n(d) Linear, bf16 weights, fp32 activations (Llama-3-8B shapes)\n");
  std::printf("%-10s %6s %6s %4s %10s %9s %10s %8s\n", "layer", "in", "out", "M", "time_us",
              "TFLOP/s", "w_GB/s", "of_hbm");
  for (const LinearShape& shape : shapes) {
    const size_t weight_bytes = static_cast<size_t>(shape.in) * shape.out * 2;
    // Enough copies to cover 512 MiB, far more than L2, so each call streams its weight.
    const int copies = static_cast<int>(std::max<size_t>(1, (size_t{512} << 20) / weight_bytes));
    std::vector<std::unique_ptr<DeviceMemory>> weights;
    for (int c = 0; c < copies; ++c) {
      weights.push_back(std::make_unique<DeviceMemory>(backend, weight_bytes));
      if (!weights.back()->ptr) {
        std::printf("Linear: out of device memory\n");
        return false;
      }
      backend.Memset(weights.back()->ptr, 0x3C, weight_bytes);
    }
    DeviceMemory x(backend, static_cast<size_t>(max_m) * shape.in * sizeof(float));
    DeviceMemory y(backend, static_cast<size_t>(max_m) * shape.out * sizeof(float));
    if (!x.ptr || !y.ptr) return false;
    backend.Memset(x.ptr, 0x3C, static_cast<size_t>(max_m) * shape.in * sizeof(float));
    for (int m : {1, 2, 4, 8, 16, 32, 64}) {
      int next = 0;
      const double us = TimeUs([&] {
        backend.Linear({x.as<float>(), weights[next]->ptr, nullptr, y.as<float>(), m, shape.in,
                        shape.out, DType::kBF16});
        next = (next + 1) % copies;
      });
      if (!backend.Synchronize()) return false;
      const double flops = 2.0 * m * shape.in * shape.out;
      const double rate = weight_bytes / (us * 1e-6);
      std::printf("%-10s %6d %6d %4d %10.1f %9.2f %10.1f %8.3f\n", shape.name, shape.in, shape.out,
                  m, us, flops / (us * 1e-6) / 1e12, rate / 1e9, rate / hbm_bytes_per_s);
    }
  }
  return true;
}

int Run() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("gpu_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  std::string error;
  std::unique_ptr<CudaBackend> backend = CudaBackend::Create(nullptr, &error);
  if (backend == nullptr) {
    std::printf("gpu_bench: %s\n", error.c_str());
    return 1;
  }
  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  const kernels::MemoryInfo memory = backend->GetMemoryInfo();
  std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f GiB free), L2 %.0f MiB\n", prop.name,
              prop.major, prop.minor, prop.multiProcessorCount, memory.total_bytes / 1073741824.0,
              memory.free_bytes / 1073741824.0, prop.l2CacheSize / 1048576.0);

  const double hbm = MeasureReadBandwidth(size_t{4} << 30, 20, &error);
  if (hbm <= 0.0) {
    std::printf("(a) HBM read bandwidth: failed: %s\n", error.c_str());
    return 1;
  }
  std::printf("(a) HBM read bandwidth (4 GiB streaming read): %.1f GB/s\n", hbm / 1e9);

  std::mt19937 rng(1);
  if (!DecodeAttention(*backend, hbm, rng)) return 1;
  if (!BF16Linear(*backend, hbm)) return 1;
  return backend->Synchronize() ? 0 : 1;
}

}  // namespace
}  // namespace kvserve::bench

int main() { return kvserve::bench::Run(); }
