// The HBM read-bandwidth probe of gpu_bench: a grid-stride read of a large buffer with 16-byte
// loads, four independent loads in flight per thread, folded into one word so the loads stay.
#include <cuda_runtime.h>

#include <cstdint>

#include "bench/gpu_bench.h"

namespace kvserve::bench {
namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;

__global__ void ReadKernel(const uint4* __restrict__ data /* [n] */, int64_t n, uint32_t magic,
                           uint32_t* sink) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  uint32_t acc = 0;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = data[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= data[i].x ^ data[i].y ^ data[i].z ^ data[i].w;
  if (acc == magic) *sink = acc;  // magic is not known at compile time: the loads must happen
}

}  // namespace

double MeasureReadBandwidth(size_t bytes, int iterations, std::string* error) {
  void* buffer = nullptr;
  uint32_t* sink = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  double result = 0.0;
  int device = 0, num_sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device);
  const int64_t n = static_cast<int64_t>(bytes / sizeof(uint4));
  const int blocks = num_sms * 4;
  cudaError_t status = cudaMalloc(&buffer, bytes);
  if (status == cudaSuccess) status = cudaMalloc(&sink, sizeof(uint32_t));
  if (status == cudaSuccess) status = cudaMemset(buffer, 0x5A, bytes);
  if (status == cudaSuccess) status = cudaEventCreate(&start);
  if (status == cudaSuccess) status = cudaEventCreate(&stop);
  if (status == cudaSuccess) {
    const auto* data = static_cast<const uint4*>(buffer);
    for (int i = 0; i < 2; ++i) ReadKernel<<<blocks, kThreads>>>(data, n, 0x9E3779B9u, sink);
    cudaEventRecord(start);
    for (int i = 0; i < iterations; ++i) {
      ReadKernel<<<blocks, kThreads>>>(data, n, 0x9E3779B9u, sink);
    }
    cudaEventRecord(stop);
    status = cudaEventSynchronize(stop);
    if (status == cudaSuccess) status = cudaGetLastError();
    float ms = 0.0f;
    if (status == cudaSuccess) status = cudaEventElapsedTime(&ms, start, stop);
    if (status == cudaSuccess && ms > 0.0f) {
      result = static_cast<double>(n) * sizeof(uint4) * iterations / (ms * 1e-3);
    }
  }
  if (status != cudaSuccess) *error = cudaGetErrorString(status);
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  cudaFree(sink);
  cudaFree(buffer);
  return status == cudaSuccess ? result : 0.0;
}

}  // namespace kvserve::bench
