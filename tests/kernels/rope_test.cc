// RoPE: both pairings, linear and llama3 frequency scaling, strided q/k, against a naive
// formulation (complex multiply for interleaved pairs, rotate-half for half pairs).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::RandomFloats;

// One head rotated at pos with inv_freq[i] = theta^(-2i/d) / linear_factor (rounded to float).
std::vector<double> NaiveRotate(const float* x, int d, double pos, double theta,
                                double linear_factor, RopeStyle style) {
  std::vector<double> out(d);
  const int half = d / 2;
  for (int i = 0; i < half; ++i) {
    // The frequency is a float in every implementation (Hugging Face's inv_freq too); the
    // angle is then exact in double.
    const double angle =
        pos *
        static_cast<double>(static_cast<float>(std::pow(theta, -2.0 * i / d) / linear_factor));
    if (style == RopeStyle::kInterleaved) {
      const std::complex<double> z(x[2 * i], x[2 * i + 1]);
      const std::complex<double> r = z * std::polar(1.0, angle);
      out[2 * i] = r.real();
      out[2 * i + 1] = r.imag();
    } else {
      // x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
      out[i] = x[i] * std::cos(angle) - x[i + half] * std::sin(angle);
      out[i + half] = x[i + half] * std::cos(angle) + x[i] * std::sin(angle);
    }
  }
  return out;
}

using RopeCase = std::tuple<int /*head_dim*/, RopeStyle, RopeScalingType, int /*tokens*/>;

class RopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeTest, RotatesQAndKLikeTheNaiveFormula) {
  const auto [head_dim, style, scaling, num_tokens] = GetParam();
  const uint32_t seed = 7 + head_dim + num_tokens;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  const int heads = 9, kv_heads = 3;
  // q and k as column slices of one fused QKV buffer: token stride (heads + 2 kv) * d.
  const int64_t stride = static_cast<int64_t>(heads + 2 * kv_heads) * head_dim;
  std::vector<float> qkv = RandomFloats(num_tokens * stride, rng, -2.0f, 2.0f);
  const std::vector<float> before = qkv;
  std::vector<int32_t> positions(num_tokens);
  for (int32_t& p : positions) p = static_cast<int32_t>(rng() % 4096);
  positions[0] = 0;
  RopeConfig config;
  config.head_dim = head_dim;
  config.theta = 100000.0f;
  config.style = style;
  config.scaling = scaling;
  config.factor = scaling == RopeScalingType::kLinear ? 4.0f : 1.0f;
  RopeParams p{qkv.data(),
               qkv.data() + heads * head_dim,
               positions.data(),
               num_tokens,
               heads,
               kv_heads,
               stride,
               stride,
               config};
  cpu::Rope(p);
  for (int t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < heads + 2 * kv_heads; ++h) {
      const int64_t at = t * stride + h * head_dim;
      const bool rotated = h < heads + kv_heads;  // v is left alone
      const std::vector<double> want =
          rotated
              ? NaiveRotate(&before[at], head_dim, positions[t], config.theta, config.factor, style)
              : std::vector<double>(before.begin() + at, before.begin() + at + head_dim);
      for (int d = 0; d < head_dim; ++d) {
        ASSERT_NEAR(qkv[at + d], want[d], 1e-5) << "t=" << t << " h=" << h << " d=" << d;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeTest,
    ::testing::Combine(::testing::Values(64, 80, 128),
                       ::testing::Values(RopeStyle::kInterleaved, RopeStyle::kHalf),
                       ::testing::Values(RopeScalingType::kNone, RopeScalingType::kLinear),
                       ::testing::Values(1, 37)));

TEST(RopeInvFreqTest, Llama3KeepsHighScalesLowAndBlendsTheBandBetween) {
  RopeConfig config;
  config.head_dim = 128;
  config.theta = 500000.0f;
  config.scaling = RopeScalingType::kLlama3;
  config.factor = 8.0f;
  config.low_freq_factor = 1.0f;
  config.high_freq_factor = 4.0f;
  config.original_max_position = 8192;
  std::vector<float> inv_freq(64);
  ComputeRopeInvFreq(config, inv_freq.data());
  int kept = 0, scaled = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    const double wavelen = 2 * M_PI / base;
    if (wavelen < 8192.0 / 4) {
      EXPECT_NEAR(inv_freq[i], base, base * 1e-6) << i;
      ++kept;
    } else if (wavelen > 8192.0 / 1) {
      EXPECT_NEAR(inv_freq[i], base / 8, base * 1e-6) << i;
      ++scaled;
    } else {
      // Strictly between the scaled and the original frequency, closer to the original the
      // shorter the wavelength.
      const double t = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      EXPECT_NEAR(inv_freq[i], (1 - t) * base / 8 + t * base, base * 1e-6) << i;
      EXPECT_GT(inv_freq[i], base / 8);
      EXPECT_LT(inv_freq[i], base);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(blended, 0);
}

}  // namespace
}  // namespace kvserve::kernels
