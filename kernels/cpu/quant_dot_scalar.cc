// The reference kernels of quant_linear.h: plain C++, any CPU. Every (sub-)block of 32 weights is
// decoded to integers w[i] with a float scale dw and offset off, so that the block's weights are
// dw * w[i] + off; its product with activation block a is then
//   dw * a.d * sum(w[i] * a.q[i]) + off * a.s,
// the same decomposition the SIMD kernels use (they differ only in fp32 summation order).
#include <cstring>

#include "kernels/cpu/quant_dispatch.h"
#include "kernels/cpu/quant_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kTokenGroup = 8;  // tokens whose accumulators are kept while a row is read

inline float LoadHalf(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return HalfToFloat(bits);
}

struct SubBlock {
  int32_t w[kActBlock];
  float dw;
  float off;
};

// Decoders: sub-block j of one weight block.
struct Q8_0 {
  static constexpr int kSubBlocks = 1;
  static void Decode(const uint8_t* block, int /*j*/, SubBlock* out) {  // block: [34]
    out->dw = LoadHalf(block);
    out->off = 0.0f;
    for (int i = 0; i < 32; ++i) out->w[i] = static_cast<int8_t>(block[2 + i]);
  }
};

template <bool kHasMin>  // Q4_1 (q d + m) or Q4_0 ((q - 8) d)
struct Q4Legacy {
  static constexpr int kSubBlocks = 1;
  static void Decode(const uint8_t* block, int /*j*/, SubBlock* out) {  // block: [18] or [20]
    const uint8_t* nibbles = block + (kHasMin ? 4 : 2);                 // [16]
    out->dw = LoadHalf(block);
    out->off = kHasMin ? LoadHalf(block + 2) : -8.0f * out->dw;
    for (int i = 0; i < 16; ++i) {
      out->w[i] = nibbles[i] & 0x0F;
      out->w[i + 16] = nibbles[i] >> 4;
    }
  }
};

template <bool kFiveBit>  // Q5_K or Q4_K
struct QK {
  static constexpr int kSubBlocks = 8;
  static void Decode(const uint8_t* block, int j, SubBlock* out) {  // block: [176] or [144]
    uint8_t scales[8], mins[8];
    UnpackKScalesMins(block + 4, scales, mins);
    out->dw = LoadHalf(block) * static_cast<float>(scales[j]);
    out->off = -LoadHalf(block + 2) * static_cast<float>(mins[j]);
    const uint8_t* high = block + 16;                                // [32] (Q5_K)
    const uint8_t* q = block + (kFiveBit ? 48 : 16) + 32 * (j / 2);  // [32]
    for (int i = 0; i < 32; ++i) {
      int value = j % 2 == 0 ? (q[i] & 0x0F) : (q[i] >> 4);
      if (kFiveBit) value |= ((high[i] >> j) & 1) << 4;
      out->w[i] = value;
    }
  }
};

struct Q6_K {
  static constexpr int kSubBlocks = 8;
  // Sub-block j = 4 half + k holds elements l + 32 k (l < 32) of half `half`; its first 16 take
  // scale 8 half + 2 k, the last 16 the next one.
  static void Decode(const uint8_t* block, int j, SubBlock* out) {  // block: [210]
    const int half = j / 4, k = j % 4;
    const uint8_t* ql = block + 64 * half + 32 * (k % 2);                                  // [32]
    const uint8_t* qh = block + 128 + 32 * half;                                           // [32]
    const auto* scales = reinterpret_cast<const int8_t*>(block + 192 + 8 * half + 2 * k);  // [2]
    out->dw = LoadHalf(block + 208);
    out->off = 0.0f;
    for (int l = 0; l < 32; ++l) {
      const int low = k < 2 ? (ql[l] & 0x0F) : (ql[l] >> 4);
      const int q = (low | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
      out->w[l] = q * scales[l / 16];
    }
  }
};

template <typename Decoder>
void Rows(const QuantRowsArgs& a, int32_t row_begin, int32_t row_end) {
  constexpr int kSub = Decoder::kSubBlocks;
  const int64_t block_bytes = a.row_bytes / (a.num_blocks / kSub);
  SubBlock sub;
  for (int32_t o = row_begin; o < row_end; ++o) {
    const uint8_t* row = a.w + o * a.row_bytes;  // [row_bytes]
    for (int32_t t0 = 0; t0 < a.num_tokens; t0 += kTokenGroup) {
      const int tokens = a.num_tokens - t0 < kTokenGroup ? a.num_tokens - t0 : kTokenGroup;
      float acc[kTokenGroup] = {};
      for (int32_t b = 0; b < a.num_blocks; ++b) {
        Decoder::Decode(row + (b / kSub) * block_bytes, b % kSub, &sub);
        for (int t = 0; t < tokens; ++t) {
          const ActBlock& x = a.x[static_cast<int64_t>(t0 + t) * a.num_blocks + b];
          int32_t dot = 0;
          for (int i = 0; i < kActBlock; ++i) dot += sub.w[i] * x.q[i];
          acc[t] += sub.dw * x.d * static_cast<float>(dot) + sub.off * x.s;
        }
      }
      for (int t = 0; t < tokens; ++t)
        a.y[static_cast<int64_t>(t0 + t) * a.out_features + o] = acc[t];
    }
  }
}

using Decoders = QuantDecoders<Q8_0, Q4Legacy<false>, Q4Legacy<true>, QK<false>, QK<true>, Q6_K>;

}  // namespace

void UnpackKScalesMins(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = packed[j] & 63;
    mins[j] = packed[j + 4] & 63;
    scales[j + 4] = (packed[j + 8] & 0x0F) | ((packed[j] >> 6) << 4);
    mins[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4);
  }
}

QuantRowsFn QuantRowsScalar(DType w_dtype) {
  return Decoders::KernelFor<QuantRowsFn>(w_dtype,
                                          []<typename D>(DecoderTag<D>) { return &Rows<D>; });
}

}  // namespace kvserve::kernels::cpu
