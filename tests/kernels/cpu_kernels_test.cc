// The CPU kernels other than attention, each against a naive loop on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iterator>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/dense_panels.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvserve::kernels {
namespace {

using testing::RandomFloats;

constexpr uint32_t kSeed = 20261129;

class CpuKernelsTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { std::printf("seed %u, tokens %d\n", kSeed, GetParam()); }
  int num_tokens() const { return GetParam(); }
  std::mt19937 rng_{kSeed};
};

TEST_P(CpuKernelsTest, EmbeddingCopiesTheRowsOfTheIds) {
  const int vocab = 1000, hidden = 72;
  std::vector<float> table = RandomFloats(vocab * hidden, rng_);
  std::vector<int32_t> ids(num_tokens());
  for (int32_t& id : ids) id = static_cast<int32_t>(rng_() % vocab);
  ids.back() = vocab - 1;
  std::vector<float> out(num_tokens() * hidden);
  cpu::Embedding({ids.data(), table.data(), out.data(), num_tokens(), vocab, hidden});
  for (int t = 0; t < num_tokens(); ++t) {
    for (int i = 0; i < hidden; ++i) ASSERT_EQ(out[t * hidden + i], table[ids[t] * hidden + i]);
  }
}

std::vector<float> NaiveRmsNorm(const std::vector<float>& x, const std::vector<float>& w,
                                int hidden, float eps) {
  std::vector<float> out(x.size());
  for (size_t t = 0; t < x.size() / hidden; ++t) {
    double sum_sq = 0.0;
    for (int i = 0; i < hidden; ++i) sum_sq += double{x[t * hidden + i]} * x[t * hidden + i];
    const double inv = 1.0 / std::sqrt(sum_sq / hidden + eps);
    for (int i = 0; i < hidden; ++i) out[t * hidden + i] = x[t * hidden + i] * inv * w[i];
  }
  return out;
}

TEST_P(CpuKernelsTest, RmsNormMatchesNaiveAndMayRunInPlace) {
  const int hidden = 72;
  const float eps = 1e-5f;
  std::vector<float> x = RandomFloats(num_tokens() * hidden, rng_, -3.0f, 3.0f);
  std::vector<float> w = RandomFloats(hidden, rng_, 0.5f, 1.5f);
  const std::vector<float> want = NaiveRmsNorm(x, w, hidden, eps);
  cpu::RmsNorm({x.data(), w.data(), x.data(), num_tokens(), hidden, eps});
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_NEAR(x[i], want[i], 1e-5f * (1 + std::fabs(want[i])));
}

TEST_P(CpuKernelsTest, AddRmsNormUpdatesResidualThenNormalisesIt) {
  const int hidden = 72;
  const float eps = 1e-6f;
  std::vector<float> residual = RandomFloats(num_tokens() * hidden, rng_);
  const std::vector<float> x = RandomFloats(num_tokens() * hidden, rng_);
  const std::vector<float> w = RandomFloats(hidden, rng_, 0.5f, 1.5f);
  std::vector<float> sum(residual.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = residual[i] + x[i];
  const std::vector<float> want = NaiveRmsNorm(sum, w, hidden, eps);
  std::vector<float> out(residual.size());
  cpu::AddRmsNorm({residual.data(), x.data(), w.data(), out.data(), num_tokens(), hidden, eps});
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_FLOAT_EQ(residual[i], sum[i]);
    ASSERT_NEAR(out[i], want[i], 1e-5f * (1 + std::fabs(want[i])));
  }
}

TEST_P(CpuKernelsTest, LinearIsXTimesWTransposedPlusBias) {
  const int in = 72, out_features = 100;
  const std::vector<float> x = RandomFloats(num_tokens() * in, rng_);
  const std::vector<float> w = RandomFloats(out_features * in, rng_);
  const std::vector<float> bias = RandomFloats(out_features, rng_);
  for (bool with_bias : {false, true}) {
    std::vector<float> y(num_tokens() * out_features, 123.0f);
    cpu::Linear({x.data(), w.data(), with_bias ? bias.data() : nullptr, y.data(), num_tokens(), in,
                 out_features});
    for (int t = 0; t < num_tokens(); ++t) {
      for (int o = 0; o < out_features; ++o) {
        double want = with_bias ? bias[o] : 0.0;
        for (int i = 0; i < in; ++i) want += double{x[t * in + i]} * w[o * in + i];
        ASSERT_NEAR(y[t * out_features + o], want, 1e-4) << "t=" << t << " o=" << o;
      }
    }
  }
}

TEST_P(CpuKernelsTest, SiluAndMulMatchesDefinition) {
  const int inter = 96;
  const std::vector<float> gate = RandomFloats(num_tokens() * inter, rng_, -6.0f, 6.0f);
  const std::vector<float> up = RandomFloats(num_tokens() * inter, rng_);
  std::vector<float> out(gate.size());
  cpu::SiluAndMul({gate.data(), up.data(), out.data(), num_tokens(), inter});
  for (size_t i = 0; i < out.size(); ++i) {
    const double want = gate[i] / (1.0 + std::exp(-double{gate[i]})) * up[i];
    ASSERT_NEAR(out[i], want, 1e-6 * (1 + std::fabs(want)));
  }
}

TEST_P(CpuKernelsTest, GatherRowsPicksTheRequestedRows) {
  const int cols = 72;
  const std::vector<float> src = RandomFloats(num_tokens() * cols, rng_);
  std::vector<int32_t> rows = {num_tokens() - 1, 0};
  if (num_tokens() > 2) rows.push_back(num_tokens() / 2);
  std::vector<float> dst(rows.size() * cols);
  cpu::GatherRows(
      {src.data(), rows.data(), dst.data(), num_tokens(), static_cast<int32_t>(rows.size()), cols});
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int c = 0; c < cols; ++c) ASSERT_EQ(dst[r * cols + c], src[rows[r] * cols + c]);
  }
}

TEST_P(CpuKernelsTest, ArgmaxFindsTheLargestLowestIdOnTies) {
  const int vocab = 1000;
  std::vector<float> logits = RandomFloats(num_tokens() * vocab, rng_);
  std::vector<int32_t> want(num_tokens());
  for (int r = 0; r < num_tokens(); ++r) {
    const int a = static_cast<int>(rng_() % vocab), b = static_cast<int>(rng_() % vocab);
    logits[r * vocab + a] = logits[r * vocab + b] = 5.0f;  // a tie at the top
    want[r] = std::min(a, b);
  }
  std::vector<int32_t> ids(num_tokens(), -1);
  cpu::Argmax({logits.data(), ids.data(), num_tokens(), vocab});
  EXPECT_EQ(ids, want);
}

TEST_P(CpuKernelsTest, WriteKvStoresEachTokenInItsSlotAndSkipsPadding) {
  const int kv_heads = 3, head_dim = 64, block_size = 16, num_blocks = 8;
  PagedKvView view{nullptr, nullptr, num_blocks, kv_heads, block_size, head_dim};
  const size_t cache_floats = size_t{num_blocks} * kv_heads * block_size * head_dim;
  std::vector<float> k_cache = RandomFloats(cache_floats, rng_);
  std::vector<float> v_cache = RandomFloats(cache_floats, rng_);
  const std::vector<float> k_before = k_cache, v_before = v_cache;
  view.k = k_cache.data();
  view.v = v_cache.data();
  // Distinct random slots, every fifth token padding.
  std::vector<int32_t> all(num_blocks * block_size);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng_);
  std::vector<int32_t> slots(all.begin(), all.begin() + num_tokens());
  for (int t = 4; t < num_tokens(); t += 5) slots[t] = -1;
  const std::vector<float> k = RandomFloats(num_tokens() * kv_heads * head_dim, rng_);
  const std::vector<float> v = RandomFloats(k.size(), rng_);
  cpu::WriteKv({k.data(), v.data(), slots.data(), num_tokens(), 0, 0, view});
  std::vector<bool> written(cache_floats, false);
  for (int t = 0; t < num_tokens(); ++t) {
    if (slots[t] < 0) continue;
    const int block = slots[t] / block_size, offset = slots[t] % block_size;
    for (int h = 0; h < kv_heads; ++h) {
      for (int d = 0; d < head_dim; ++d) {
        const size_t at =
            ((static_cast<size_t>(block) * kv_heads + h) * block_size + offset) * head_dim + d;
        ASSERT_EQ(k_cache[at], k[(t * kv_heads + h) * head_dim + d]);
        ASSERT_EQ(v_cache[at], v[(t * kv_heads + h) * head_dim + d]);
        written[at] = true;
      }
    }
  }
  for (size_t i = 0; i < cache_floats; ++i) {
    if (!written[i]) {
      ASSERT_TRUE(k_cache[i] == k_before[i] && v_cache[i] == v_before[i]) << i;
    }
  }
}

// SiLU through the branch-free exp (cpu_math.h), far out on both sides.
TEST(CpuKernelsSiluTest, ExtremeGatesStayFiniteAndAccurate) {
  const float gates[] = {-1000.0f, -100.0f, -88.0f, -87.0f, -20.0f, -1e-30f, 0.0f,
                         1e-30f,   0.5f,    20.0f,  87.0f,  88.0f,  100.0f,  1000.0f};
  const int n = static_cast<int>(std::size(gates));
  std::vector<float> up(n, 1.0f), out(n);
  cpu::SiluAndMul({gates, up.data(), out.data(), 1, n});
  for (int i = 0; i < n; ++i) {
    const double want = gates[i] / (1.0 + std::exp(-double{gates[i]}));
    ASSERT_TRUE(std::isfinite(out[i])) << gates[i];
    ASSERT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-33) << gates[i];
  }
}

// CpuBackend splits a step's tokens over its pool for the elementwise kernels; every token's
// result is the bits of the single-threaded kernel.
TEST_P(CpuKernelsTest, BackendGivesTheSingleThreadBitsWhenItSplitsTokens) {
  cpu::CpuBackend backend(2);
  const int T = num_tokens(), hidden = 72, inter = 96, heads = 3, kv_heads = 1, head_dim = 24;
  const float eps = 1e-5f;
  const std::vector<float> x = RandomFloats(T * hidden, rng_, -3.0f, 3.0f);
  const std::vector<float> w = RandomFloats(hidden, rng_, 0.5f, 1.5f);
  std::vector<float> want(x.size()), got(x.size());
  cpu::RmsNorm({x.data(), w.data(), want.data(), T, hidden, eps});
  backend.RmsNorm({x.data(), w.data(), got.data(), T, hidden, eps});
  ASSERT_EQ(got, want);

  std::vector<float> residual_want = RandomFloats(T * hidden, rng_), residual_got = residual_want;
  cpu::AddRmsNorm({residual_want.data(), x.data(), w.data(), want.data(), T, hidden, eps});
  backend.AddRmsNorm({residual_got.data(), x.data(), w.data(), got.data(), T, hidden, eps});
  ASSERT_EQ(residual_got, residual_want);
  ASSERT_EQ(got, want);

  const std::vector<float> gate = RandomFloats(T * inter, rng_, -6.0f, 6.0f);
  const std::vector<float> up = RandomFloats(T * inter, rng_);
  std::vector<float> silu_want(gate.size()), silu_got(gate.size());
  cpu::SiluAndMul({gate.data(), up.data(), silu_want.data(), T, inter});
  backend.SiluAndMul({gate.data(), up.data(), silu_got.data(), T, inter});
  ASSERT_EQ(silu_got, silu_want);

  // q and k as column slices of one fused qkv row (strides), as the model passes them.
  const int qkv = (heads + 2 * kv_heads) * head_dim;
  std::vector<float> fused_want = RandomFloats(T * qkv, rng_), fused_got = fused_want;
  std::vector<int32_t> positions(T);
  for (int t = 0; t < T; ++t) positions[t] = 3 * t + 1;
  RopeConfig rope{.head_dim = head_dim};
  cpu::Rope({fused_want.data(), fused_want.data() + heads * head_dim, positions.data(), T, heads,
             kv_heads, qkv, qkv, rope});
  backend.Rope({fused_got.data(), fused_got.data() + heads * head_dim, positions.data(), T, heads,
                kv_heads, qkv, qkv, rope});
  ASSERT_EQ(fused_got, fused_want);
  // The backend keeps the table of the positions it last saw: the same positions again, then
  // other positions, then another rotary config must each rotate as cpu::Rope does.
  for (int variant = 0; variant < 3; ++variant) {
    if (variant == 1) {
      for (int32_t& position : positions) position += 5;
    }
    RopeConfig other = rope;
    if (variant == 2) other.theta = 500000.0f;
    std::vector<float> again_want = RandomFloats(T * qkv, rng_), again_got = again_want;
    cpu::Rope({again_want.data(), again_want.data() + heads * head_dim, positions.data(), T, heads,
               kv_heads, qkv, qkv, other});
    backend.Rope({again_got.data(), again_got.data() + heads * head_dim, positions.data(), T, heads,
                  kv_heads, qkv, qkv, other});
    ASSERT_EQ(again_got, again_want) << "variant " << variant;
  }

  const int block_size = 16, num_blocks = (T + block_size - 1) / block_size + 1;
  const size_t cache_values = size_t{1} * num_blocks * kv_heads * block_size * head_dim;
  std::vector<uint16_t> k_want(cache_values), v_want(cache_values), k_got(cache_values),
      v_got(cache_values);
  std::vector<int32_t> slots(T);
  for (int t = 0; t < T; ++t) slots[t] = t % 7 == 3 ? -1 : t + block_size / 2;
  const float* k = fused_want.data() + heads * head_dim;
  const float* v = k + kv_heads * head_dim;
  PagedKvView want_view{k_want.data(), v_want.data(), num_blocks, kv_heads,
                        block_size,    head_dim,      DType::kF16};
  PagedKvView got_view = want_view;
  got_view.k = k_got.data();
  got_view.v = v_got.data();
  cpu::WriteKv({k, v, slots.data(), T, qkv, qkv, want_view});
  backend.WriteKv({k, v, slots.data(), T, qkv, qkv, got_view});
  ASSERT_EQ(k_got, k_want);
  ASSERT_EQ(v_got, v_want);
}

INSTANTIATE_TEST_SUITE_P(Tokens, CpuKernelsTest, ::testing::Values(1, 4, 5, 37));

// Every regime of cpu::Linear on f32 weights (with AVX2, the dense-rows kernel's one-token and
// batch tiles; without, the portable loop up to 16 tokens and SGEMM above), each with and without
// the pool, against a double-precision loop; sizes that are not multiples of the kernel's 8-float
// chunks, 3- and 4-row or 4-token tiles or 64-row work items.
TEST(CpuLinearTest, EveryBatchSizeMatchesNaiveLoopWithAndWithoutPool) {
  std::mt19937 rng(7);
  cpu::ThreadPool pool(2);
  const int in = 77, out_features = 130;
  const std::vector<float> w = RandomFloats(out_features * in, rng);
  const std::vector<float> bias = RandomFloats(out_features, rng);
  for (int tokens : {1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 33}) {
    const std::vector<float> x = RandomFloats(tokens * in, rng);
    for (cpu::ThreadPool* maybe_pool : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
      std::vector<float> y(tokens * out_features, 123.0f);
      cpu::Linear({x.data(), w.data(), bias.data(), y.data(), tokens, in, out_features},
                  maybe_pool);
      for (int t = 0; t < tokens; ++t) {
        for (int o = 0; o < out_features; ++o) {
          double want = bias[o];
          for (int i = 0; i < in; ++i) want += double{x[t * in + i]} * w[o * in + i];
          ASSERT_NEAR(y[t * out_features + o], want, 1e-4)
              << "tokens=" << tokens << " t=" << t << " o=" << o
              << " pool=" << (maybe_pool != nullptr);
        }
      }
    }
  }
}

// A token's Linear on dense weights (f32, bf16, f16) is the same bits alone (a decode) as in a
// batch of any size (a prefill, batched decode), so a token's result does not depend on how many
// tokens run beside it. With AVX2 (the dense-rows kernel) for every type; f32 below AVX2 only up
// to 16 tokens (SGEMM above). The 16-bit types on their AVX2 kernel: the AVX-512 ones (a machine
// that has them) are not this kernel.
TEST(CpuLinearTest, OneTokenAloneMatchesItsRowInAnyBatchBitForBit) {
  std::mt19937 rng(8);
  std::printf("seed 8\n");
  cpu::ThreadPool pool(2);
  const int in = 77, out_features = 130;
  const std::vector<float> w = RandomFloats(out_features * in, rng);
  std::vector<uint16_t> w_bf16(w.size()), w_f16(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    w_bf16[i] = FloatToBFloat16(w[i]);
    w_f16[i] = FloatToHalf(w[i]);
  }
  struct Weights {
    DType dtype;
    const void* data;
  };
  const bool avx2 = cpu::DetectedCpuIsa() >= cpu::CpuIsa::kAvx2;
  if (avx2) cpu::SetCpuIsaCapForTesting(cpu::CpuIsa::kAvx2);
  std::vector<Weights> types = {{DType::kF32, w.data()}};
  if (avx2) types.insert(types.end(), {{DType::kBF16, w_bf16.data()}, {DType::kF16, w_f16.data()}});
  for (const Weights& weights : types) {
    for (int tokens : {2, 3, 5, 16, 17, 37, 100}) {
      if (!avx2 && tokens > 16) continue;
      const std::vector<float> x = RandomFloats(tokens * in, rng);
      std::vector<float> batch(tokens * out_features);
      cpu::Linear(
          {x.data(), weights.data, nullptr, batch.data(), tokens, in, out_features, weights.dtype},
          &pool);
      for (int t = 0; t < tokens; ++t) {
        std::vector<float> alone(out_features);
        cpu::Linear({x.data() + t * in, weights.data, nullptr, alone.data(), 1, in, out_features,
                     weights.dtype},
                    &pool);
        ASSERT_EQ(alone, std::vector<float>(batch.begin() + t * out_features,
                                            batch.begin() + (t + 1) * out_features))
            << "token " << t << " of " << tokens << ", " << DTypeName(weights.dtype);
      }
    }
  }
  cpu::SetCpuIsaCapForTesting(cpu::CpuIsa::kAvx512);
}

// f32 and bf16 weights in the panel form (dense_panels.h, what CpuBackend::PackWeight makes on an
// AVX2 machine): the AVX2 panel kernel against a double-precision loop on the same weights, every
// batch size from the decode tile to several 6-token tiles and a short last one, with and without
// the pool; an odd in_features (bf16's last column pair half empty) and out_features not a multiple
// of the 8-row panel (the last panel's pad rows computed, not stored), an in_features over the
// kernel's 512-column blocks (a batch's chains stored and resumed). Then each token's result
// alone against its row in the batch, bit for bit.
TEST(CpuLinearTest, PackedPanelsMatchNaiveLoopAndOneTokenAloneBitForBit) {
  if (cpu::DetectedCpuIsa() < cpu::CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2: no panel kernel";
  std::printf("panel kernel: AVX2 + FMA (CPU: %s)\n", cpu::CpuIsaName(cpu::DetectedCpuIsa()));
  std::mt19937 rng(9);
  cpu::ThreadPool pool(2);
  for (auto [in, out_features] : {std::pair{77, 130}, {64, 200}, {1101, 24}}) {
    std::vector<float> w = RandomFloats(out_features * in, rng);
    std::vector<uint16_t> w_bf16(w.size());
    std::vector<float> w_bf16_values(w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      w_bf16[i] = FloatToBFloat16(w[i]);
      w_bf16_values[i] = BFloat16ToFloat(w_bf16[i]);
    }
    const std::vector<float> bias = RandomFloats(out_features, rng);
    for (auto [dtype, rows, values] :
         {std::tuple{DType::kF32, static_cast<const void*>(w.data()), &w},
          {DType::kBF16, w_bf16.data(), &w_bf16_values}}) {
      // Whole panels of 8 rows, bf16 columns padded to even: the form's size and nothing more.
      const int64_t panels = (out_features + 7) / 8;
      const int64_t bytes =
          dtype == DType::kF32 ? panels * in * 8 * 4 : panels * ((in + 1) / 2 * 2) * 8 * 2;
      std::vector<uint8_t> packed(cpu::DensePanelBytes(dtype, out_features, in));
      ASSERT_EQ(static_cast<int64_t>(packed.size()), bytes) << DTypeName(dtype);
      cpu::PackDensePanels(rows, dtype, out_features, in, packed.data());
      for (int tokens : {1, 2, 5, 6, 7, 12, 13, 33, 100}) {
        const std::vector<float> x = RandomFloats(tokens * in, rng);
        for (cpu::ThreadPool* maybe_pool : {static_cast<cpu::ThreadPool*>(nullptr), &pool}) {
          std::vector<float> y(tokens * out_features, 123.0f);
          cpu::Linear({x.data(), packed.data(), bias.data(), y.data(), tokens, in, out_features,
                       dtype, /*w_packed=*/true},
                      maybe_pool);
          for (int t = 0; t < tokens; ++t) {
            for (int o = 0; o < out_features; ++o) {
              double want = bias[o];
              for (int i = 0; i < in; ++i) want += double{x[t * in + i]} * (*values)[o * in + i];
              ASSERT_NEAR(y[t * out_features + o], want, 1e-4)
                  << DTypeName(dtype) << " in=" << in << " tokens=" << tokens << " t=" << t
                  << " o=" << o << " pool=" << (maybe_pool != nullptr);
            }
          }
          if (maybe_pool == nullptr) continue;
          for (int t = 0; t < tokens; ++t) {
            std::vector<float> alone(out_features);
            cpu::Linear({x.data() + t * in, packed.data(), nullptr, alone.data(), 1, in,
                         out_features, dtype, /*w_packed=*/true},
                        &pool);
            for (int o = 0; o < out_features; ++o) alone[o] += bias[o];
            ASSERT_EQ(alone, std::vector<float>(y.begin() + t * out_features,
                                                y.begin() + (t + 1) * out_features))
                << DTypeName(dtype) << " token " << t << " of " << tokens;
          }
        }
      }
    }
  }
}

// A tied model's one packed table (Backend::EmbeddingReadsPacked): the lookup from the panels is
// the rows' lookup exactly, f32 and bf16, rows in every position of a panel and in the last,
// partial one, an odd hidden size (bf16's half-empty last column pair).
TEST(CpuEmbeddingTest, LookupFromPanelsMatchesRows) {
  cpu::CpuBackend backend(1);
  std::mt19937 rng(10);
  const int vocab = 21, hidden = 37;
  const std::vector<float> table = RandomFloats(vocab * hidden, rng);
  std::vector<uint16_t> table_bf16(table.size());
  for (size_t i = 0; i < table.size(); ++i) table_bf16[i] = FloatToBFloat16(table[i]);
  std::vector<int32_t> ids(vocab);
  for (int i = 0; i < vocab; ++i) ids[i] = vocab - 1 - i;
  for (auto [dtype, rows] : {std::pair{DType::kF32, static_cast<const void*>(table.data())},
                             {DType::kBF16, table_bf16.data()}}) {
    if (!backend.EmbeddingReadsPacked(dtype)) {
      std::printf("%s: the lookup reads rows only here\n", DTypeName(dtype));
      continue;
    }
    std::vector<uint8_t> packed(backend.PackedWeightBytes(dtype, vocab, hidden));
    backend.PackWeight(rows, dtype, vocab, hidden, packed.data());
    std::vector<float> want(vocab * hidden), got(vocab * hidden);
    backend.Embedding({ids.data(), rows, want.data(), vocab, vocab, hidden, dtype});
    backend.Embedding({ids.data(), packed.data(), got.data(), vocab, vocab, hidden, dtype,
                       /*table_packed=*/true});
    EXPECT_EQ(got, want) << DTypeName(dtype);
  }
}

TEST(ThreadPoolTest, RunsEveryItemExactlyOnceWithValidThreadIndex) {
  cpu::ThreadPool pool(2);
  ASSERT_EQ(pool.num_threads(), 2);
  for (int round = 0; round < 50; ++round) {
    const int n = 1 + round * 7;
    std::vector<std::atomic<int>> hits(n);
    std::atomic<bool> bad_index{false};
    pool.ParallelFor(n, [&](int64_t i, int thread_index) {
      hits[i].fetch_add(1);
      if (thread_index < 0 || thread_index >= 2) bad_index = true;
    });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "round " << round;
    ASSERT_FALSE(bad_index.load());
  }
}

// More threads than this machine's cores, so workers are descheduled mid-loop and wake late into
// later loops: thousands of short loops back to back, then one loop longer than a loop word holds
// (it runs as several), each item exactly once, and no loop ends before its items are done.
TEST(ThreadPoolTest, LateWorkersNeverRunAnItemTwiceOrOfTheWrongLoop) {
  cpu::ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(8);
  for (int round = 0; round < 20000; ++round) {
    const int n = 2 + round % 7;
    pool.ParallelFor(n, [&](int64_t i, int /*thread_index*/) { hits[i].fetch_add(1); });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].exchange(0), 1) << "round " << round;
  }
  const int64_t many = 200003;
  std::vector<std::atomic<uint8_t>> seen(many);
  pool.ParallelFor(many, [&](int64_t i, int /*thread_index*/) { seen[i].fetch_add(1); });
  for (int64_t i = 0; i < many; ++i) ASSERT_EQ(seen[i].load(), 1) << "item " << i;
}

// Copies beside the compute (the copy thread): every region lands, in queue order (a later copy to
// the same bytes wins), by JoinCopies and by Synchronize; the caller computes meanwhile.
TEST(CpuBackendTest, CopiesBesideTheComputeLandInOrderByTheJoin) {
  cpu::CpuBackend backend(2);
  constexpr size_t kBytes = 1 << 16;
  constexpr int kRegions = 64;
  std::vector<std::vector<uint8_t>> sources(kRegions, std::vector<uint8_t>(kBytes));
  for (int r = 0; r < kRegions; ++r) std::fill(sources[r].begin(), sources[r].end(), r + 1);
  std::vector<uint8_t> device(kBytes * (kRegions / 2));
  for (int round = 0; round < 50; ++round) {
    std::vector<Backend::CopyRegion> regions;
    for (int r = 0; r < kRegions; ++r) {  // region r and r + 32 write the same bytes
      regions.push_back({.dst = device.data() + (r % (kRegions / 2)) * kBytes,
                         .src = sources[r].data(),
                         .bytes = kBytes});
    }
    backend.CopyFromHostBeside(regions.data(), kRegions / 2);
    backend.CopyFromHostBeside(regions.data() + kRegions / 2, kRegions / 2);
    if (round % 2 == 0) {
      backend.JoinCopies();
    } else {
      ASSERT_TRUE(backend.Synchronize());
    }
    for (int r = 0; r < kRegions / 2; ++r) {
      ASSERT_EQ(device[r * kBytes], r + kRegions / 2 + 1) << "round " << round;
      ASSERT_EQ(device[(r + 1) * kBytes - 1], r + kRegions / 2 + 1) << "round " << round;
    }
    std::fill(device.begin(), device.end(), 0);
  }
}

}  // namespace
}  // namespace kvserve::kernels
