// Row dequantization of every storage type (kernels/dtype.h) to fp32: the one decoder of GGUF's
// block layouts, used by the CPU kernels (embedding rows, reference paths) and by the model
// readers (model/dequantize.h). Block layouts are spelled out in model/dequantize.h.
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/half_linear.h"
#include "kernels/cpu/quant_linear.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kBlockSize = 32;

inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_0 and Q4_1 share the nibble order: low nibbles are the first 16 elements, high the last 16.
// Q4_0 is (q - 8) d (kSigned), Q4_1 is q d + m; each written as its format defines it so that
// results match other implementations bit for bit.
template <bool kSigned>
void DequantizeQ4Block(const uint8_t* nibbles, float scale, float offset, float* out) {
  for (int j = 0; j < kBlockSize / 2; ++j) {
    const int lo = nibbles[j] & 0x0F;
    const int hi = nibbles[j] >> 4;
    if constexpr (kSigned) {
      out[j] = static_cast<float>(lo - 8) * scale;
      out[j + kBlockSize / 2] = static_cast<float>(hi - 8) * scale;
    } else {
      out[j] = static_cast<float>(lo) * scale + offset;
      out[j + kBlockSize / 2] = static_cast<float>(hi) * scale + offset;
    }
  }
}

void DequantizeQ4KBlock(const uint8_t* block, float* out) {  // block: [144], out: [256]
  const float d = HalfToFloat(LoadU16(block));
  const float dmin = HalfToFloat(LoadU16(block + 2));
  uint8_t scales[8], mins[8];
  UnpackKScalesMins(block + 4, scales, mins);
  const uint8_t* q = block + 16;  // [128]
  for (int chunk = 0; chunk < 4; ++chunk) {
    const int scale_lo = scales[2 * chunk], min_lo = mins[2 * chunk];
    const int scale_hi = scales[2 * chunk + 1], min_hi = mins[2 * chunk + 1];
    const float d_lo = d * static_cast<float>(scale_lo), m_lo = dmin * static_cast<float>(min_lo);
    const float d_hi = d * static_cast<float>(scale_hi), m_hi = dmin * static_cast<float>(min_hi);
    const uint8_t* bytes = q + 32 * chunk;
    float* dst = out + 64 * chunk;
    for (int l = 0; l < 32; ++l) {
      dst[l] = d_lo * static_cast<float>(bytes[l] & 0x0F) - m_lo;
      dst[l + 32] = d_hi * static_cast<float>(bytes[l] >> 4) - m_hi;
    }
  }
}

void DequantizeQ5KBlock(const uint8_t* block, float* out) {  // block: [176], out: [256]
  const float d = HalfToFloat(LoadU16(block));
  const float dmin = HalfToFloat(LoadU16(block + 2));
  uint8_t scales[8], mins[8];
  UnpackKScalesMins(block + 4, scales, mins);
  const uint8_t* high = block + 16;  // [32]
  const uint8_t* q = block + 48;     // [128]
  for (int chunk = 0; chunk < 4; ++chunk) {
    const int scale_lo = scales[2 * chunk], min_lo = mins[2 * chunk];
    const int scale_hi = scales[2 * chunk + 1], min_hi = mins[2 * chunk + 1];
    const float d_lo = d * static_cast<float>(scale_lo), m_lo = dmin * static_cast<float>(min_lo);
    const float d_hi = d * static_cast<float>(scale_hi), m_hi = dmin * static_cast<float>(min_hi);
    const uint8_t* bytes = q + 32 * chunk;
    float* dst = out + 64 * chunk;
    for (int l = 0; l < 32; ++l) {
      const int bit_lo = (high[l] >> (2 * chunk)) & 1;
      const int bit_hi = (high[l] >> (2 * chunk + 1)) & 1;
      dst[l] = d_lo * static_cast<float>((bytes[l] & 0x0F) | (bit_lo << 4)) - m_lo;
      dst[l + 32] = d_hi * static_cast<float>((bytes[l] >> 4) | (bit_hi << 4)) - m_hi;
    }
  }
}

void DequantizeQ6KBlock(const uint8_t* block, float* out) {           // block: [210], out: [256]
  const uint8_t* low = block;                                         // [128]
  const uint8_t* high = block + 128;                                  // [64]
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);  // [16]
  const float d = HalfToFloat(LoadU16(block + 208));
  // Each half of 128 elements uses 64 low bytes, 32 high bytes and 8 scales. Within a half,
  // element l + 32 k (k = 0..3) takes low nibble k / 2 of byte l + 32 (k % 2) and bits 2k, 2k+1
  // of high byte l.
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = low + 64 * half;
    const uint8_t* qh = high + 32 * half;
    const int8_t* sc = scales + 8 * half;
    float* dst = out + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int group = l / 16;
      for (int k = 0; k < 4; ++k) {
        const uint8_t low_byte = ql[l + 32 * (k % 2)];
        const int low_bits = k < 2 ? (low_byte & 0x0F) : (low_byte >> 4);
        const int high_bits = (qh[l] >> (2 * k)) & 3;
        const int q = (low_bits | (high_bits << 4)) - 32;
        dst[l + 32 * k] = (d * static_cast<float>(sc[group + 2 * k])) * static_cast<float>(q);
      }
    }
  }
}

}  // namespace

void DequantizeRow(const void* src, DType type, int64_t n, float* dst_all) {
  const auto* data = static_cast<const uint8_t*>(src);
  const int64_t block_elements = GetDTypeInfo(type).block_elements;
  const int64_t block_bytes = GetDTypeInfo(type).block_bytes;
  const int64_t num_blocks = n / block_elements;
  const int64_t num_bytes = num_blocks * block_bytes;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst_all, data, num_bytes);
      break;
    case DType::kF16:
    case DType::kBF16:
      if (ActiveCpuIsa() >= CpuIsa::kAvx2 && reinterpret_cast<uintptr_t>(data) % 2 == 0) {
        WidenHalfAvx2(reinterpret_cast<const uint16_t*>(data), type == DType::kBF16, n, dst_all);
      } else if (type == DType::kF16) {
        for (int64_t i = 0; i < n; ++i) dst_all[i] = HalfToFloat(LoadU16(data + 2 * i));
      } else {
        for (int64_t i = 0; i < n; ++i) dst_all[i] = BFloat16ToFloat(LoadU16(data + 2 * i));
      }
      break;
    case DType::kQ4_0:
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;  // [d: 2][nibbles: 16]
        DequantizeQ4Block<true>(block + 2, HalfToFloat(LoadU16(block)), 0.0f,
                                dst_all + b * kBlockSize);
      }
      break;
    case DType::kQ4_1:
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;  // [d: 2][m: 2][nibbles: 16]
        DequantizeQ4Block<false>(block + 4, HalfToFloat(LoadU16(block)),
                                 HalfToFloat(LoadU16(block + 2)), dst_all + b * kBlockSize);
      }
      break;
    case DType::kQ8_0:
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;  // [d: 2][int8: 32]
        const float scale = HalfToFloat(LoadU16(block));
        float* dst = dst_all + b * kBlockSize;
        for (int j = 0; j < kBlockSize; ++j) {
          dst[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * scale;
        }
      }
      break;
    case DType::kQ4_K:
      for (int64_t b = 0; b < num_blocks; ++b) {
        DequantizeQ4KBlock(data + b * block_bytes, dst_all + b * block_elements);
      }
      break;
    case DType::kQ5_K:
      for (int64_t b = 0; b < num_blocks; ++b) {
        DequantizeQ5KBlock(data + b * block_bytes, dst_all + b * block_elements);
      }
      break;
    case DType::kQ6_K:
      for (int64_t b = 0; b < num_blocks; ++b) {
        DequantizeQ6KBlock(data + b * block_bytes, dst_all + b * block_elements);
      }
      break;
  }
}

}  // namespace kvserve::kernels::cpu
