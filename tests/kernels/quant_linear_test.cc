// cpu::Linear on weights as stored (GGUF block types, bf16, f16), on every instruction set this
// machine has (scalar, AVX2, AVX-512; SetCpuIsaCapForTesting picks each), against the exact
// product x . dequantize(W)^T computed in double from DequantizeRow of the same bytes.
//
// Tolerances. Block types quantize x per 32-element block b to d_b q_i with d_b = max|x| / 127
// and round to nearest, so |x_i - d_b q_i| <= d_b / 2 and
//   |y - y_exact| <= sum_b (d_b / 2) sum_{i in b} |w_i|       (about 1/254 of sum |w x|),
// which the test computes per output and allows in full, plus 1e-5 sum |w x| for fp32
// accumulation and scale rounding. f16 / widened bf16 are exact but for fp32 rounding: 1e-5 sum
// |w x|. bf16 through vdpbf16ps rounds x to bf16 (relative error <= 2^-9): 2^-9 sum |w x| more.
// The SIMD kernels and the scalar one see the same quantized activations, so they must agree to
// fp32 summation order: 1e-5 sum |w x|, hundreds of times tighter than the bound above.
#include "kernels/cpu/quant_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/quant_test_util.h"

namespace kvserve::kernels {
namespace {

using cpu::CpuIsa;

constexpr uint32_t kSeed = 20261201;
constexpr int kOutFeatures = 130;  // not a multiple of the 64-row pool items

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (isa <= cpu::DetectedCpuIsa()) isas.push_back(isa);
  }
  return isas;
}

// Restores the ISA cap when a test ends, however it ends.
class IsaCapGuard {
 public:
  ~IsaCapGuard() { cpu::SetCpuIsaCapForTesting(CpuIsa::kAvx512); }
};

struct Reference {
  std::vector<double> y;      // [tokens, out]: x . dequantize(W)^T + bias
  std::vector<double> scale;  // [tokens, out]: sum |w x|
  std::vector<double> bound;  // [tokens, out]: sum_b (d_b / 2) sum_{i in b} |w_i|
};

Reference ComputeReference(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>& bias, int tokens, int in) {
  Reference r;
  r.y.resize(size_t{1} * tokens * kOutFeatures);
  r.scale.resize(r.y.size());
  r.bound.resize(r.y.size());
  for (int t = 0; t < tokens; ++t) {
    const float* xt = &x[size_t{1} * t * in];
    for (int o = 0; o < kOutFeatures; ++o) {
      const float* wo = &w[size_t{1} * o * in];
      double y = bias[o], scale = 0.0, bound = 0.0;
      for (int b = 0; b < in / 32; ++b) {
        double amax = 0.0, wsum = 0.0;
        for (int i = 32 * b; i < 32 * b + 32; ++i) {
          y += double{xt[i]} * wo[i];
          scale += std::fabs(double{xt[i]} * wo[i]);
          amax = std::max(amax, std::fabs(double{xt[i]}));
          wsum += std::fabs(double{wo[i]});
        }
        bound += amax / 127.0 / 2.0 * wsum;
      }
      r.y[t * kOutFeatures + o] = y;
      r.scale[t * kOutFeatures + o] = scale;
      r.bound[t * kOutFeatures + o] = bound;
    }
  }
  return r;
}

class QuantLinearTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    std::printf("seed %u, type %s, isas:", kSeed, DTypeName(GetParam()));
    for (CpuIsa isa : AvailableIsas()) std::printf(" %s", cpu::CpuIsaName(isa));
    std::printf("\n");
  }
};

TEST_P(QuantLinearTest, EveryIsaMatchesDoubleReferenceWithinQuantizationBound) {
  const DType type = GetParam();
  const bool block_quantized = IsBlockQuantized(type);
  std::mt19937 rng(kSeed + static_cast<uint32_t>(type));
  cpu::ThreadPool pool(2);
  IsaCapGuard guard;
  for (int in : {256, 576, 1536}) {
    if (in % GetDTypeInfo(type).block_elements != 0) continue;
    const std::vector<uint8_t> w_bytes = testing::RandomWeights(kOutFeatures, in, type, rng);
    std::vector<float> w(size_t{1} * kOutFeatures * in);
    for (int o = 0; o < kOutFeatures; ++o) {
      cpu::DequantizeRow(w_bytes.data() + o * RowBytes(type, in), type, in, &w[size_t{1} * o * in]);
    }
    const std::vector<float> bias = testing::RandomFloats(kOutFeatures, rng);
    for (int tokens : {1, 2, 3, 7, 16, 33, 64}) {
      // Activations of uneven magnitude across blocks, as after an RMSNorm with outliers.
      std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * in, rng, -2.0f, 2.0f);
      for (size_t i = 0; i < x.size(); i += 97) x[i] *= 8.0f;
      const Reference ref = ComputeReference(x, w, bias, tokens, in);
      std::vector<float> scalar_y;
      for (CpuIsa isa : AvailableIsas()) {
        cpu::SetCpuIsaCapForTesting(isa);
        ASSERT_EQ(cpu::ActiveCpuIsa(), isa);
        std::vector<float> y(size_t{1} * tokens * kOutFeatures, 123.0f);
        cpu::ThreadPool* maybe_pool = tokens % 2 == 1 ? &pool : nullptr;
        cpu::Linear(
            {x.data(), w_bytes.data(), bias.data(), y.data(), tokens, in, kOutFeatures, type},
            maybe_pool);
        const bool bf16_dot =
            type == DType::kBF16 && isa == CpuIsa::kAvx512 && cpu::CpuHasAvx512Bf16();
        for (size_t i = 0; i < y.size(); ++i) {
          double tolerance = 1e-5 * ref.scale[i] + 1e-6;
          if (block_quantized) tolerance += ref.bound[i];
          if (bf16_dot) tolerance += std::ldexp(ref.scale[i], -9);
          ASSERT_NEAR(y[i], ref.y[i], tolerance)
              << "isa=" << cpu::CpuIsaName(isa) << " in=" << in << " tokens=" << tokens
              << " t=" << i / kOutFeatures << " o=" << i % kOutFeatures;
        }
        if (isa == CpuIsa::kScalar) {
          scalar_y = y;
        } else if (!bf16_dot) {
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], scalar_y[i], 1e-5 * ref.scale[i] + 1e-6)
                << "isa=" << cpu::CpuIsaName(isa) << " vs scalar, in=" << in << " tokens=" << tokens
                << " t=" << i / kOutFeatures << " o=" << i % kOutFeatures;
          }
        }
      }
    }
  }
}

// A token's output does not depend on the batch it is computed in: alone, in a batch of 7 or of
// 33, with or without the pool, every bit is the same. Migration and preemption rely on it (a
// prefix recomputed as one prefill must give the KV its decode steps wrote, and the same next
// token). f32 weights are not covered: they go through OpenBLAS's SGEMV / SGEMM by batch size.
TEST_P(QuantLinearTest, ATokensOutputIsTheSameInEveryBatch) {
  const DType type = GetParam();
  std::mt19937 rng(kSeed + 7 * static_cast<uint32_t>(type));
  cpu::ThreadPool pool(2);
  IsaCapGuard guard;
  const int in = 1536, tokens = 33;
  const std::vector<uint8_t> w_bytes = testing::RandomWeights(kOutFeatures, in, type, rng);
  const std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * in, rng, -2.0f, 2.0f);
  for (CpuIsa isa : AvailableIsas()) {
    cpu::SetCpuIsaCapForTesting(isa);
    std::vector<float> all(size_t{1} * tokens * kOutFeatures);
    cpu::Linear({x.data(), w_bytes.data(), nullptr, all.data(), tokens, in, kOutFeatures, type},
                &pool);
    for (int first : {0, 5, 26}) {
      for (int count : {1, 7}) {
        std::vector<float> part(size_t{1} * count * kOutFeatures);
        cpu::Linear({&x[size_t{1} * first * in], w_bytes.data(), nullptr, part.data(), count, in,
                     kOutFeatures, type},
                    count == 1 ? nullptr : &pool);
        for (size_t i = 0; i < part.size(); ++i) {
          ASSERT_EQ(part[i], all[size_t{1} * first * kOutFeatures + i])
              << "isa=" << cpu::CpuIsaName(isa) << " token " << first + i / kOutFeatures
              << " in a batch of " << count << ", row " << i % kOutFeatures;
        }
      }
    }
  }
}

// The packed form (PackQuantRows) holds the file's bytes rearranged, and Linear on it gives, on
// every instruction set and in every batch, the same bits as the reference kernel on it (the AVX2
// and AVX-512 kernels apply the reference's operations in the reference's order), within the
// quantization bound of the exact product.
TEST(QuantLinearTest, PackedWeightsGiveTheReferenceBitsOnEveryIsaAndBatch) {
  std::mt19937 rng(kSeed + 13);
  cpu::ThreadPool pool(2);
  IsaCapGuard guard;
  EXPECT_EQ(cpu::PackedQuantBytes(DType::kQ4_K, 64, 256), 0);
  EXPECT_EQ(cpu::PackedQuantBytes(DType::kQ4_1, 64, 100), 0);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    ASSERT_TRUE(cpu::IsPackableQuantType(type));
    EXPECT_EQ(cpu::PackedQuantBytes(type, 64, 576), 64 * RowBytes(type, 576));
    for (int in : {96, 576}) {
      const std::vector<uint8_t> w_bytes = testing::RandomWeights(kOutFeatures, in, type, rng);
      std::vector<uint8_t> packed(cpu::PackedQuantBytes(type, kOutFeatures, in));
      cpu::PackQuantRows(w_bytes.data(), type, kOutFeatures, in, packed.data());
      std::vector<float> w(size_t{1} * kOutFeatures * in);
      for (int o = 0; o < kOutFeatures; ++o) {
        cpu::DequantizeRow(w_bytes.data() + o * RowBytes(type, in), type, in,
                           &w[size_t{1} * o * in]);
      }
      const std::vector<float> bias = testing::RandomFloats(kOutFeatures, rng);
      for (int tokens : {1, 2, 8, 9, 33}) {
        const std::vector<float> x =
            testing::RandomFloats(size_t{1} * tokens * in, rng, -2.0f, 2.0f);
        const Reference ref = ComputeReference(x, w, bias, tokens, in);
        std::vector<float> want;
        for (CpuIsa isa : AvailableIsas()) {
          cpu::SetCpuIsaCapForTesting(isa);
          ASSERT_EQ(cpu::ActiveCpuIsa(), isa);
          std::vector<float> y(size_t{1} * tokens * kOutFeatures, 123.0f);
          cpu::Linear({x.data(), packed.data(), bias.data(), y.data(), tokens, in, kOutFeatures,
                       type, /*w_packed=*/true},
                      tokens > 1 ? &pool : nullptr);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], ref.y[i], 1e-5 * ref.scale[i] + 1e-6 + ref.bound[i])
                << DTypeName(type) << " isa=" << cpu::CpuIsaName(isa) << " in=" << in
                << " tokens=" << tokens << " i=" << i;
          }
          if (want.empty()) want = y;
          ASSERT_EQ(y, want) << DTypeName(type) << " isa=" << cpu::CpuIsaName(isa) << " in=" << in
                             << " tokens=" << tokens;
          if (tokens != 33) continue;
          for (int t : {0, 8, 32}) {  // alone, each gives its row of the batch
            std::vector<float> alone(kOutFeatures);
            cpu::Linear({&x[size_t{1} * t * in], packed.data(), bias.data(), alone.data(), 1, in,
                         kOutFeatures, type, true},
                        nullptr);
            ASSERT_EQ(alone, std::vector<float>(y.begin() + t * kOutFeatures,
                                                y.begin() + (t + 1) * kOutFeatures))
                << DTypeName(type) << " isa=" << cpu::CpuIsaName(isa) << " token " << t;
          }
        }
      }
    }
  }
}

// Weights and activations at the ends of their integer ranges (Q4 nibbles 15; Q8_0 q = 127 and
// -128, stored packed as u = 255 and 0; activations +-127, all of one sign in a block) give the
// reference's bits on every instruction set: the SIMD kernels' int16 pair sums neither saturate
// nor wrap (a vpmaddubsw straight on Q8_0's u would: 2 * 255 * 127 > 32767).
TEST(QuantLinearTest, PackedKernelsAreExactAtTheEndsOfTheIntegerRanges) {
  IsaCapGuard guard;
  const int rows = 40, in = 256, tokens = 5;  // 2.5 tiles; token groups of 3 and 4 and a rest
  // Token t's activations: +1 (t = 0), -1 (t = 1), a block of each sign alternately (t = 2),
  // the sign flipping every 4 elements (t = 3), every element (t = 4). Every q is +-127.
  const int run[tokens] = {in, in, 32, 4, 1};  // elements per run of one sign
  std::vector<float> x(size_t{1} * tokens * in);
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < in; ++i) {
      const bool negative = (t == 1) != ((i / run[t]) % 2 == 1);
      x[size_t{1} * t * in + i] = negative ? -1.0f : 1.0f;
    }
  }
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    // Row o's weights: Q8_0 q = 127 (o % 3 == 0), -128 (1) or alternating by element (2); Q4
    // nibbles all 15. d = 1, Q4_1 m = -1.
    const int64_t row_bytes = RowBytes(type, in);
    const int block_bytes = GetDTypeInfo(type).block_bytes;
    const uint16_t one = FloatToHalf(1.0f), minus_one = FloatToHalf(-1.0f);
    std::vector<uint8_t> w(size_t{1} * rows * row_bytes);
    std::vector<double> w_value(size_t{1} * rows * in);  // dequantized
    for (int o = 0; o < rows; ++o) {
      for (int b = 0; b < in / 32; ++b) {
        uint8_t* block = &w[o * row_bytes + b * block_bytes];  // d[, m], weights
        std::memcpy(block, &one, 2);
        if (type == DType::kQ4_1) std::memcpy(block + 2, &minus_one, 2);
        for (int i = 0; i < 32; ++i) {
          double value;
          if (type == DType::kQ8_0) {
            const int q = o % 3 == 0 || (o % 3 == 2 && i % 2 == 0) ? 127 : -128;
            block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
            value = q;
          } else {
            block[(type == DType::kQ4_1 ? 4 : 2) + i % 16] = 0xFF;
            value = type == DType::kQ4_1 ? 15 - 1 : 15 - 8;
          }
          w_value[size_t{1} * o * in + 32 * b + i] = value;
        }
      }
    }
    std::vector<uint8_t> packed(cpu::PackedQuantBytes(type, rows, in));
    cpu::PackQuantRows(w.data(), type, rows, in, packed.data());
    std::vector<float> want(size_t{1} * tokens * rows);
    cpu::SetCpuIsaCapForTesting(CpuIsa::kScalar);
    cpu::Linear({x.data(), packed.data(), nullptr, want.data(), tokens, in, rows, type, true});
    for (int t = 0; t < tokens; ++t) {  // x = +-1 and q = +-127 are exact: so is the product
      for (int o = 0; o < rows; ++o) {
        double exact = 0.0;
        for (int i = 0; i < in; ++i) {
          exact += x[size_t{1} * t * in + i] * w_value[size_t{1} * o * in + i];
        }
        ASSERT_NEAR(want[t * rows + o], exact, 1e-5 * 128 * in)
            << DTypeName(type) << " token " << t << " row " << o;
      }
    }
    for (CpuIsa isa : AvailableIsas()) {
      cpu::SetCpuIsaCapForTesting(isa);
      ASSERT_EQ(cpu::ActiveCpuIsa(), isa);
      std::vector<float> y(want.size(), 123.0f);
      cpu::Linear({x.data(), packed.data(), nullptr, y.data(), tokens, in, rows, type, true});
      ASSERT_EQ(y, want) << DTypeName(type) << " on " << cpu::CpuIsaName(isa);
    }
  }
}

// LinearSameInput (q, k and v as one loop over all their rows, x quantized once) gives each
// product exactly what Linear gives it, also when the products' types differ (Q4_K_M files keep
// some matrices in Q6_K) and with biases.
TEST(QuantLinearTest, ProductsOfOneInputAsOneLoopEqualEachAlone) {
  std::mt19937 rng(kSeed + 11);
  cpu::ThreadPool pool(2);
  IsaCapGuard guard;
  const int in = 512;
  for (const auto& types : {std::vector<DType>{DType::kQ4_1, DType::kQ4_1, DType::kQ4_1},
                            std::vector<DType>{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K},
                            std::vector<DType>{DType::kQ8_0, DType::kBF16}}) {
    const int count = static_cast<int>(types.size());
    std::vector<std::vector<uint8_t>> w;
    std::vector<std::vector<float>> bias;
    const int outs[] = {130, 64, 70};
    for (int i = 0; i < count; ++i) {
      w.push_back(testing::RandomWeights(outs[i], in, types[i], rng));
      bias.push_back(testing::RandomFloats(outs[i], rng));
    }
    for (int tokens : {1, 5}) {
      const std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * in, rng);
      for (CpuIsa isa : AvailableIsas()) {
        cpu::SetCpuIsaCapForTesting(isa);
        std::vector<std::vector<float>> alone(count), together(count);
        std::vector<LinearParams> params;
        for (int i = 0; i < count; ++i) {
          alone[i].resize(size_t{1} * tokens * outs[i]);
          together[i].resize(alone[i].size(), -1.0f);
          cpu::Linear({x.data(), w[i].data(), bias[i].data(), alone[i].data(), tokens, in, outs[i],
                       types[i]},
                      &pool);
          params.push_back({x.data(), w[i].data(), bias[i].data(), together[i].data(), tokens, in,
                            outs[i], types[i]});
        }
        cpu::LinearSameInput(params.data(), count, &pool);
        for (int i = 0; i < count; ++i) {
          ASSERT_EQ(together[i], alone[i])
              << "isa=" << cpu::CpuIsaName(isa) << " product " << i << " (" << DTypeName(types[i])
              << "), " << tokens << " tokens";
        }
      }
    }
  }
}

// The block-type error bound is a real bound, not slack: it is about 1/254 of sum |w x|, and the
// observed error must reach a fair part of it somewhere (else the kernel would not be quantizing).
TEST(QuantLinearTest, Q8_0ErrorIsTheActivationQuantizationError) {
  std::mt19937 rng(kSeed);
  const int in = 1536, tokens = 4;
  const std::vector<uint8_t> w_bytes = testing::RandomWeights(kOutFeatures, in, DType::kQ8_0, rng);
  std::vector<float> w(size_t{1} * kOutFeatures * in);
  for (int o = 0; o < kOutFeatures; ++o) {
    cpu::DequantizeRow(w_bytes.data() + o * RowBytes(DType::kQ8_0, in), DType::kQ8_0, in,
                       &w[size_t{1} * o * in]);
  }
  const std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * in, rng);
  const std::vector<float> zero_bias(kOutFeatures, 0.0f);
  const Reference ref = ComputeReference(x, w, zero_bias, tokens, in);
  std::vector<float> y(size_t{1} * tokens * kOutFeatures);
  cpu::Linear(
      {x.data(), w_bytes.data(), nullptr, y.data(), tokens, in, kOutFeatures, DType::kQ8_0});
  double max_ratio = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    max_ratio = std::max(max_ratio, std::fabs(y[i] - ref.y[i]) / ref.bound[i]);
  }
  std::printf("max |error| / bound = %.3f\n", max_ratio);
  EXPECT_LT(max_ratio, 1.0);
  EXPECT_GT(max_ratio, 0.01);
}

// The SIMD versions of the activation quantizer, of the 16-bit widening (DequantizeRow of f16 /
// bf16, which attention uses on a 16-bit KV cache) and of the f16 narrowing (NarrowRow, the KV
// write) give the scalar versions' bits.
TEST(CpuIsaTest, ActivationQuantizerAndHalfConversionsAreExactOnEveryIsa) {
  std::mt19937 rng(kSeed);
  const int tokens = 3, in = 576;
  std::vector<float> x = testing::RandomFloats(size_t{1} * tokens * in, rng, -3.0f, 3.0f);
  for (int i = 0; i < 32; ++i) x[64 + i] = 0.0f;  // an all-zero block
  x[5] = 1e-30f;                                  // a tiny value beside normal ones
  std::vector<cpu::ActBlock> want(size_t{1} * tokens * in / 32), got(want.size());
  cpu::QuantizeActivations(x.data(), tokens, in, want.data());
  const auto same = [](const cpu::ActBlock& a, const cpu::ActBlock& b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
  };
  if (cpu::DetectedCpuIsa() >= CpuIsa::kAvx2) {
    cpu::QuantizeActivationsAvx2(x.data(), tokens, in, got.data());
    for (size_t b = 0; b < want.size(); ++b)
      ASSERT_TRUE(same(got[b], want[b])) << "avx2 block " << b;
  }
  if (cpu::DetectedCpuIsa() >= CpuIsa::kAvx512) {
    cpu::QuantizeActivationsAvx512(x.data(), tokens, in, got.data());
    for (size_t b = 0; b < want.size(); ++b)
      ASSERT_TRUE(same(got[b], want[b])) << "avx512 block " << b;
  }
  IsaCapGuard guard;
  for (DType type : {DType::kF16, DType::kBF16}) {
    const int n = 1003;  // not a multiple of the vector width
    std::vector<uint16_t> bits(n);
    for (int i = 0; i < n; ++i) {
      bits[i] = static_cast<uint16_t>(rng());
      // Every f16 pattern but NaNs (F16C sets the quiet bit of a signalling NaN's payload).
      if (type == DType::kF16 && (bits[i] & 0x7C00) == 0x7C00 && (bits[i] & 0x3FF) != 0) {
        bits[i] = 0x3C00;
      }
    }
    std::vector<float> scalar(n), simd(n);
    cpu::SetCpuIsaCapForTesting(CpuIsa::kScalar);
    cpu::DequantizeRow(bits.data(), type, n, scalar.data());
    for (CpuIsa isa : AvailableIsas()) {
      cpu::SetCpuIsaCapForTesting(isa);
      cpu::DequantizeRow(bits.data(), type, n, simd.data());
      ASSERT_EQ(std::memcmp(scalar.data(), simd.data(), sizeof(float) * n), 0)
          << DTypeName(type) << " on " << cpu::CpuIsaName(isa);
    }
  }
  // Narrowing to f16: random bit patterns (normals, subnormals, values that round to f16
  // subnormals or overflow to infinity), halfway cases, and the specials.
  std::vector<float> values(2000);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    std::memcpy(&values[i], &bits, 4);
    if (std::isnan(values[i])) values[i] = 1.0f;
    if (i % 4 == 1) values[i] = std::ldexp(static_cast<float>(rng() % 4096) - 2048.0f, -20);
    if (i % 4 == 2) values[i] = std::ldexp(static_cast<float>(rng() % 65536) + 0.5f, -14 - i % 16);
  }
  for (float special :
       {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -1e30f, 5.96e-8f, 2.98e-8f,
        std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    values.push_back(special);
  }
  const int n = static_cast<int>(values.size());
  std::vector<uint16_t> want_half(n), got_half(n);
  cpu::SetCpuIsaCapForTesting(CpuIsa::kScalar);
  cpu::NarrowRow(values.data(), DType::kF16, n, want_half.data());
  for (CpuIsa isa : AvailableIsas()) {
    cpu::SetCpuIsaCapForTesting(isa);
    cpu::NarrowRow(values.data(), DType::kF16, n, got_half.data());
    for (int i = 0; i < n; ++i) {
      if (std::isnan(values[i])) {  // a NaN stays a NaN (F16C keeps the payload's high bits)
        ASSERT_TRUE((got_half[i] & 0x7C00) == 0x7C00 && (got_half[i] & 0x3FF) != 0);
        continue;
      }
      ASSERT_EQ(got_half[i], want_half[i])
          << values[i] << " on " << cpu::CpuIsaName(isa) << " (i = " << i << ")";
    }
  }
}

TEST(CpuIsaTest, TestCapLowersTheActiveIsa) {
  IsaCapGuard guard;
  for (CpuIsa isa : AvailableIsas()) {
    cpu::SetCpuIsaCapForTesting(isa);
    EXPECT_EQ(cpu::ActiveCpuIsa(), isa);
  }
  std::printf("detected %s, avx512_bf16 %d\n", cpu::CpuIsaName(cpu::DetectedCpuIsa()),
              cpu::CpuHasAvx512Bf16());
}

INSTANTIATE_TEST_SUITE_P(Types, QuantLinearTest,
                         ::testing::Values(DType::kQ4_1, DType::kQ8_0, DType::kQ4_0, DType::kQ6_K,
                                           DType::kQ4_K, DType::kQ5_K, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace kvserve::kernels
