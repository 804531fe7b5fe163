// Random weights in every storage type for the typed Linear tests and benchmarks: small scalar
// quantizers that turn random floats into valid GGUF blocks (not the reference quantizers: any
// valid block will do, since the tests compare against DequantizeRow of the same bytes).
// Header-only; host memory.
#ifndef KVSERVE_TESTS_KERNELS_QUANT_TEST_UTIL_H_
#define KVSERVE_TESTS_KERNELS_QUANT_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dense_panels.h"
#include "kernels/cpu/quant_linear.h"
#include "kernels/dtype.h"

namespace kvserve::kernels::testing {

inline void StoreHalf(uint8_t* p, float value) {
  const uint16_t bits = FloatToHalf(value);
  std::memcpy(p, &bits, 2);
}

inline int RoundClamp(float value, int lo, int hi) {
  return std::clamp(static_cast<int>(std::lround(value)), lo, hi);
}

// Q4_K / Q5_K: (scale, min) of sub-block j into the 12 packed bytes (inverse of the decoder).
inline void PackKScaleMin(uint8_t* packed /* [12] */, int j, int scale, int min) {
  if (j < 4) {
    packed[j] = static_cast<uint8_t>((packed[j] & 0xC0) | scale);
    packed[j + 4] = static_cast<uint8_t>((packed[j + 4] & 0xC0) | min);
  } else {
    packed[j + 4] = static_cast<uint8_t>((scale & 0x0F) | ((min & 0x0F) << 4));
    packed[j - 4] = static_cast<uint8_t>((packed[j - 4] & 0x3F) | ((scale >> 4) << 6));
    packed[j] = static_cast<uint8_t>((packed[j] & 0x3F) | ((min >> 4) << 6));
  }
}

// One row of `n` values in `type`, written to out (RowBytes(type, n) bytes).
inline void QuantizeRowForTest(const float* v, int64_t n, DType type, uint8_t* out) {
  switch (type) {
    case DType::kF32:
      std::memcpy(out, v, n * 4);
      return;
    case DType::kBF16:
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = type == DType::kBF16 ? FloatToBFloat16(v[i]) : FloatToHalf(v[i]);
        std::memcpy(out + 2 * i, &bits, 2);
      }
      return;
    default:
      break;
  }
  const DTypeInfo info = GetDTypeInfo(type);
  for (int64_t b = 0; b < n / info.block_elements; ++b) {
    const float* x = v + b * info.block_elements;
    uint8_t* block = out + b * info.block_bytes;
    std::memset(block, 0, info.block_bytes);
    if (type == DType::kQ8_0 || type == DType::kQ4_0 || type == DType::kQ4_1) {
      float lo = x[0], hi = x[0], amax = 0.0f;
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        amax = std::max(amax, std::fabs(x[i]));
      }
      if (type == DType::kQ8_0) {
        const float d = amax / 127.0f;
        StoreHalf(block, d);
        for (int i = 0; i < 32; ++i) {
          block[2 + i] = static_cast<uint8_t>(RoundClamp(d > 0 ? x[i] / d : 0.0f, -128, 127));
        }
      } else if (type == DType::kQ4_0) {
        const float d = amax / 8.0f;
        StoreHalf(block, d);
        for (int i = 0; i < 16; ++i) {
          const int q0 = RoundClamp(d > 0 ? x[i] / d + 8 : 8.0f, 0, 15);
          const int q1 = RoundClamp(d > 0 ? x[i + 16] / d + 8 : 8.0f, 0, 15);
          block[2 + i] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      } else {
        const float d = (hi - lo) / 15.0f;
        StoreHalf(block, d);
        StoreHalf(block + 2, lo);
        for (int i = 0; i < 16; ++i) {
          const int q0 = RoundClamp(d > 0 ? (x[i] - lo) / d : 0.0f, 0, 15);
          const int q1 = RoundClamp(d > 0 ? (x[i + 16] - lo) / d : 0.0f, 0, 15);
          block[4 + i] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      continue;
    }
    if (type == DType::kQ6_K) {
      // Per 16 elements an int8 scale relative to d; q in [-32, 31].
      float amax = 0.0f;
      for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / (32.0f * 127.0f);
      StoreHalf(block + 208, d);
      const float d_stored = HalfToFloat(FloatToHalf(d));
      for (int g = 0; g < 16; ++g) {
        // Element e = 128 half + l + 32 k sits in group 8 half + 2 k + l / 16.
        float gmax = 0.0f;
        for (int e = 0; e < 256; ++e) {
          const int half = e / 128, l = e % 32, k = (e % 128) / 32;
          if (8 * half + 2 * k + l / 16 == g) gmax = std::max(gmax, std::fabs(x[e]));
        }
        const int scale = d_stored > 0 ? RoundClamp(gmax / 32.0f / d_stored, 1, 127) : 1;
        block[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(scale));
      }
      for (int e = 0; e < 256; ++e) {
        const int half = e / 128, l = e % 32, k = (e % 128) / 32;
        const float step = d_stored * static_cast<int8_t>(block[192 + 8 * half + 2 * k + l / 16]);
        const int q = (step > 0 ? RoundClamp(x[e] / step, -32, 31) : 0) + 32;
        uint8_t& low = block[64 * half + l + 32 * (k % 2)];
        low = static_cast<uint8_t>(low | ((q & 0x0F) << (k < 2 ? 0 : 4)));
        block[128 + 32 * half + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
      }
      continue;
    }
    // Q4_K / Q5_K: sub-block j = x[32 j ..] as d scale_j q - dmin min_j.
    const bool five = type == DType::kQ5_K;
    const int qmax = five ? 31 : 15;
    float ranges[8], mins[8], max_range = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      float lo = x[32 * j], hi = x[32 * j];
      for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, x[32 * j + i]);
        hi = std::max(hi, x[32 * j + i]);
      }
      mins[j] = std::max(0.0f, -lo);
      ranges[j] = (hi + mins[j]) / qmax;
      max_range = std::max(max_range, ranges[j]);
      max_min = std::max(max_min, mins[j]);
    }
    StoreHalf(block, max_range / 63.0f);
    StoreHalf(block + 2, max_min / 63.0f);
    const float d = HalfToFloat(FloatToHalf(max_range / 63.0f));
    const float dmin = HalfToFloat(FloatToHalf(max_min / 63.0f));
    uint8_t* q = block + (five ? 48 : 16);
    for (int j = 0; j < 8; ++j) {
      const int scale = d > 0 ? RoundClamp(ranges[j] / d + 0.5f, 0, 63) : 0;
      const int min = dmin > 0 ? RoundClamp(mins[j] / dmin, 0, 63) : 0;
      PackKScaleMin(block + 4, j, scale, min);
      for (int i = 0; i < 32; ++i) {
        const float step = d * scale;
        const int value = step > 0 ? RoundClamp((x[32 * j + i] + dmin * min) / step, 0, qmax) : 0;
        q[32 * (j / 2) + i] |= static_cast<uint8_t>((value & 0x0F) << (j % 2 == 0 ? 0 : 4));
        if (five) block[16 + i] |= static_cast<uint8_t>((value >> 4) << j);
      }
    }
  }
}

// A [rows, cols] matrix of random floats stored as `type`: uniform in [-1, 1), each group of 16
// scaled by its own factor in [e^-2, e) and shifted by its own offset, so that the per-block and
// per-sub-block scales and mins of the encodings differ (a kernel reading the wrong one fails).
inline std::vector<uint8_t> RandomWeights(int64_t rows, int64_t cols, DType type,
                                          std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> row(cols);
  const int64_t row_bytes = RowBytes(type, cols);
  std::vector<uint8_t> out(rows * row_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    float factor = 1.0f, shift = 0.0f;
    for (int64_t i = 0; i < cols; ++i) {
      if (i % 16 == 0) {
        factor = std::exp(1.5f * dist(rng) - 0.5f);
        shift = 0.5f * factor * dist(rng);
      }
      row[i] = factor * dist(rng) + shift;
    }
    QuantizeRowForTest(row.data(), cols, type, out.data() + r * row_bytes);
  }
  return out;
}

// RandomWeights(rows, cols, type), as stored or, with packed (REQUIRES: IsPackableQuantType or
// HasDensePanels), in the CPU backend's packed form (PackQuantRows, PackDensePanels).
inline std::vector<uint8_t> RandomWeightsAs(int64_t rows, int64_t cols, DType type, bool packed,
                                            std::mt19937& rng) {
  std::vector<uint8_t> stored = RandomWeights(rows, cols, type, rng);
  if (!packed) return stored;
  if (cpu::HasDensePanels(type)) {
    std::vector<uint8_t> panels(cpu::DensePanelBytes(type, rows, cols));
    cpu::PackDensePanels(stored.data(), type, rows, cols, panels.data());
    return panels;
  }
  std::vector<uint8_t> tiles(cpu::PackedQuantBytes(type, rows, cols));
  cpu::PackQuantRows(stored.data(), type, rows, cols, tiles.data());
  return tiles;
}

}  // namespace kvserve::kernels::testing

#endif  // KVSERVE_TESTS_KERNELS_QUANT_TEST_UTIL_H_
