// Helpers of the CUDA kernel tests: device copies of host vectors, host rounding to a storage
// type, a tolerance check, and the fixture that skips (GTEST_SKIP) where no device is present
// and prints the seed of its random inputs (KVSERVE_TEST_SEED overrides it).
#ifndef KVSERVE_TESTS_KERNELS_CUDA_TEST_UTIL_H_
#define KVSERVE_TESTS_KERNELS_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"

namespace kvserve::kernels::testing {

// A device copy of a host vector; frees on destruction.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), std::max<size_t>(1, size_) * sizeof(T)),
              cudaSuccess);
    Upload(host);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  // REQUIRES: host.size() == size().
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), size_);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_;
};

// values stored as dtype (f32, bf16, f16), as bytes.
inline std::vector<uint8_t> StoreAs(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(RowBytes(dtype, static_cast<int64_t>(values.size())));
  cpu::NarrowRow(values.data(), dtype, static_cast<int64_t>(values.size()), bytes.data());
  return bytes;
}

// values rounded to dtype and widened back to fp32.
inline std::vector<float> RoundTo(const std::vector<float>& values, DType dtype) {
  const std::vector<uint8_t> stored = StoreAs(values, dtype);
  std::vector<float> out(values.size());
  cpu::DequantizeRow(stored.data(), dtype, static_cast<int64_t>(values.size()), out.data());
  return out;
}

// |got - want| <= tolerance * (1 + |want|) element by element; stops at the first miss.
inline void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                       float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1.0f + std::fabs(want[i]))) << "element " << i;
  }
}

inline bool HasCudaDevice() {
  int count = 0;
  const bool has = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return has;
}

inline uint32_t TestSeed() {
  const char* env = std::getenv("KVSERVE_TEST_SEED");
  return env != nullptr && *env != '\0' ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10))
                                        : 777u;
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
    std::string error;
    gpu_ = cuda::CudaBackend::Create(nullptr, &error);
    ASSERT_NE(gpu_, nullptr) << error;
    std::printf("seed %u (KVSERVE_TEST_SEED to change)\n", seed_);
  }
  void Sync() { ASSERT_TRUE(gpu_->Synchronize()); }

  uint32_t seed_ = TestSeed();
  std::mt19937 rng_{seed_};
  std::unique_ptr<cuda::CudaBackend> gpu_;
};

}  // namespace kvserve::kernels::testing

#endif  // KVSERVE_TESTS_KERNELS_CUDA_TEST_UTIL_H_
