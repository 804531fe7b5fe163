// Pieces of gpu_bench that must be compiled by nvcc (kernels), called from gpu_bench.cc.
#ifndef KVSERVE_BENCH_GPU_BENCH_H_
#define KVSERVE_BENCH_GPU_BENCH_H_

#include <cstddef>
#include <string>

namespace kvserve::bench {

// Bytes per second read from device memory by a streaming read of `bytes` bytes, averaged over
// `iterations` passes after two warm-up passes, on the current device's legacy stream.
// 0 and *error set on a CUDA error.
double MeasureReadBandwidth(size_t bytes, int iterations, std::string* error);

}  // namespace kvserve::bench

#endif  // KVSERVE_BENCH_GPU_BENCH_H_
