// CudaBackend::Linear against the CPU backend for every weight type it takes, on random inputs.
//  - f32: cuBLAS SGEMM vs OpenBLAS / our kernels, both fp32: tolerance 1e-4 x (1 + |y|).
//  - bf16, f16: the GPU rounds x to the weight type and sums in fp32, for one token in our GEMV
//    (up to 8192 rows: the 3-weight case below), beyond on tensor cores. The CPU is fed the
//    same rounded x and the same 16-bit weights, so every product is exact on both and only the
//    summation differs (order, and the tensor cores' fp32 adder): tolerance 1e-3 x (1 + |y|)
//    for |y| ~ sqrt(in) ~ 30. in_features not a multiple of 8 (100) takes cuBLAS at any size.
//  - LinearSameInput: q, k, v shaped weights (outputs not a multiple of the GEMV's rows) in one
//    call, each equal to its own CPU Linear.
// Skips where no CUDA device is present; ctest label gpu.
#include <gtest/gtest.h>

#include <deque>
#include <sstream>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::DeviceBuffer;
using testing::ExpectNear;
using testing::RandomFloats;
using testing::RoundTo;
using testing::StoreAs;

using LinearCase = std::tuple<DType, int /*in*/, int /*out*/>;

class CudaLinearTest : public testing::CudaTest,
                       public ::testing::WithParamInterface<LinearCase> {};

TEST_P(CudaLinearTest, MatchesCpuOnSameRoundedInputsForEveryBatchSize) {
  const auto [dtype, in, out] = GetParam();
  const int max_tokens = 300;
  ASSERT_TRUE(gpu_->ReserveLinear(max_tokens, in));
  const std::vector<uint8_t> w = StoreAs(RandomFloats(static_cast<size_t>(out) * in, rng_), dtype);
  const std::vector<float> bias = RandomFloats(out, rng_);
  DeviceBuffer<uint8_t> d_w(w);
  DeviceBuffer<float> d_bias(bias);
  const float tolerance = dtype == DType::kF32 ? 1e-4f : 1e-3f;
  for (int tokens : {1, 2, 3, 5, 8, 9, 16, 37, max_tokens}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " tokens " << tokens);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(tokens) * in, rng_);
    // The GPU rounds x itself; the CPU gets it rounded already.
    const std::vector<float> x_rounded = dtype == DType::kF32 ? x : RoundTo(x, dtype);
    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
      std::vector<float> want(static_cast<size_t>(tokens) * out);
      cpu::Linear({x_rounded.data(), w.data(), b, want.data(), tokens, in, out, dtype});
      DeviceBuffer<float> d_x(x), d_y(std::vector<float>(want.size(), -7.0f));
      gpu_->Linear(
          {d_x.get(), d_w.get(), b ? d_bias.get() : nullptr, d_y.get(), tokens, in, out, dtype});
      Sync();
      ExpectNear(d_y.ToHost(), want, tolerance);
    }
  }
}

TEST_P(CudaLinearTest, SameInputProductsEachMatchTheCpu) {
  const auto [dtype, in, out] = GetParam();
  ASSERT_TRUE(gpu_->ReserveLinear(64, in));
  const int outs[] = {out, out / 4 + 3, 13};  // q, k, v-like: one weight of each size
  std::vector<std::vector<uint8_t>> w;
  std::deque<DeviceBuffer<uint8_t>> d_w;  // DeviceBuffer does not move
  for (int o : outs) {
    w.push_back(StoreAs(RandomFloats(static_cast<size_t>(o) * in, rng_), dtype));
    d_w.emplace_back(w.back());
  }
  const std::vector<float> bias = RandomFloats(out, rng_);
  DeviceBuffer<float> d_bias(bias);
  const float tolerance = dtype == DType::kF32 ? 1e-4f : 1e-3f;
  for (int tokens : {1, 2, 4, 5, 64}) {
    SCOPED_TRACE(::testing::Message() << DTypeName(dtype) << " tokens " << tokens);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(tokens) * in, rng_);
    const std::vector<float> x_rounded = dtype == DType::kF32 ? x : RoundTo(x, dtype);
    DeviceBuffer<float> d_x(x);
    std::deque<DeviceBuffer<float>> d_y;
    LinearParams p[3];
    for (int i = 0; i < 3; ++i) {
      d_y.emplace_back(std::vector<float>(static_cast<size_t>(tokens) * outs[i], -7.0f));
      // Bias on the first only, as in a model with a q bias alone.
      p[i] = {d_x.get(), d_w[i].get(), i == 0 ? d_bias.get() : nullptr, d_y[i].get(), tokens, in,
              outs[i],   dtype};
    }
    gpu_->LinearSameInput(p, 3);
    Sync();
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(::testing::Message() << "weight " << i);
      std::vector<float> want(static_cast<size_t>(tokens) * outs[i]);
      cpu::Linear({x_rounded.data(), w[i].data(), i == 0 ? bias.data() : nullptr, want.data(),
                   tokens, in, outs[i], dtype});
      ExpectNear(d_y[i].ToHost(), want, tolerance);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    WeightTypes, CudaLinearTest,
    ::testing::Values(LinearCase{DType::kF32, 576, 1536}, LinearCase{DType::kF32, 1024, 768},
                      LinearCase{DType::kBF16, 576, 1536}, LinearCase{DType::kBF16, 1024, 768},
                      LinearCase{DType::kF16, 576, 1536}, LinearCase{DType::kF16, 1024, 768},
                      LinearCase{DType::kBF16, 1000, 260}, LinearCase{DType::kBF16, 100, 40}),
    [](const ::testing::TestParamInfo<LinearCase>& info) {
      // A stream, not string operator+: GCC 12 -O3 flags that with a false -Wrestrict.
      std::ostringstream name;
      name << DTypeName(std::get<0>(info.param)) << "_" << std::get<1>(info.param) << "x"
           << std::get<2>(info.param);
      return name.str();
    });

}  // namespace
}  // namespace kvserve::kernels
