// Storage types of weights, activations and the KV cache, as the kernels see them, and the
// scalar conversions every backend and reader shares (one copy of each rounding rule).
//
// A type is a block of `block_elements` values stored in `block_bytes` bytes: 1 value for the
// plain types (f32, bf16, f16), 32 for GGUF's Q8_0 / Q4_0 / Q4_1 and 256 for its K-quants. A
// row of `cols` values of a block type takes cols / block_elements blocks, so cols must be a
// multiple of block_elements. The block layouts are GGUF's (model/dequantize.h spells them out).
// Pure functions and constants; thread-safe.
#ifndef KVSERVE_KERNELS_DTYPE_H_
#define KVSERVE_KERNELS_DTYPE_H_

#include <cstdint>
#include <cstring>

namespace kvserve::kernels {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

struct DTypeInfo {
  const char* name;  // "f32", "bf16", "f16", "q8_0", ...
  int32_t block_elements;
  int32_t block_bytes;
};

constexpr DTypeInfo GetDTypeInfo(DType type) {
  switch (type) {
    case DType::kF32:
      return {"f32", 1, 4};
    case DType::kBF16:
      return {"bf16", 1, 2};
    case DType::kF16:
      return {"f16", 1, 2};
    case DType::kQ8_0:
      return {"q8_0", 32, 34};
    case DType::kQ4_0:
      return {"q4_0", 32, 18};
    case DType::kQ4_1:
      return {"q4_1", 32, 20};
    case DType::kQ4_K:
      return {"q4_k", 256, 144};
    case DType::kQ5_K:
      return {"q5_k", 256, 176};
    case DType::kQ6_K:
      return {"q6_k", 256, 210};
  }
  return {"?", 1, 0};
}

constexpr const char* DTypeName(DType type) { return GetDTypeInfo(type).name; }
constexpr bool IsBlockQuantized(DType type) { return GetDTypeInfo(type).block_elements > 1; }

// Bytes of `cols` values of `type`. REQUIRES: cols % block_elements == 0.
constexpr int64_t RowBytes(DType type, int64_t cols) {
  const DTypeInfo info = GetDTypeInfo(type);
  return cols / info.block_elements * info.block_bytes;
}

// The bits of a float and back (std::bit_cast is C++20; the CUDA sources are C++17).
inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
inline float BitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// ---------------------------------------------------------------------------------------------
// Scalar conversions. bfloat16 is the high half of an fp32; binary16 is IEEE half precision.
// Float -> 16-bit rounds to nearest even; NaN stays NaN; infinities and subnormals are kept.

inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1F;
  uint32_t mantissa = half & 0x3FF;
  uint32_t bits;
  if (exponent == 0x1F) {  // inf / NaN
    bits = sign | 0x7F800000 | (mantissa << 13);
  } else if (exponent != 0) {  // normal
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {  // signed zero
    bits = sign;
  } else {  // subnormal: value = mantissa * 2^-24, normalise it
    int shift = 0;
    while ((mantissa & 0x400) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3FF;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mantissa << 13);
  }
  return BitsFloat(bits);
}

inline uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits >= 0x7F800000) {  // inf / NaN (keep NaN a NaN)
    return sign | 0x7C00 | (abs_bits > 0x7F800000 ? 0x200 : 0);
  }
  if (abs_bits >= 0x477FF000) return sign | 0x7C00;  // rounds to >= 65520: overflow to inf
  const int32_t exponent = static_cast<int32_t>(abs_bits >> 23) - 127;
  if (exponent < -25) return sign;                       // below half the smallest subnormal: zero
  uint32_t mantissa = (abs_bits & 0x7FFFFF) | 0x800000;  // with the implicit bit
  // Number of low mantissa bits to drop: 13 for normals, more for subnormals.
  const int shift = exponent >= -14 ? 13 : 13 + (-14 - exponent);
  const uint32_t halfway = 1u << (shift - 1);
  const uint32_t rest = mantissa & ((1u << shift) - 1);
  uint32_t rounded = mantissa >> shift;
  if (rest > halfway || (rest == halfway && (rounded & 1))) ++rounded;
  if (exponent >= -14) {
    // rounded holds the implicit bit at 1<<10; a carry to 1<<11 bumps the exponent naturally.
    return sign | static_cast<uint16_t>((static_cast<uint32_t>(exponent + 14) << 10) + rounded);
  }
  return sign | static_cast<uint16_t>(rounded);  // subnormal (a carry makes the smallest normal)
}

inline float BFloat16ToFloat(uint16_t bf16) {
  return BitsFloat(static_cast<uint32_t>(bf16) << 16);
}

inline uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace kvserve::kernels

#endif  // KVSERVE_KERNELS_DTYPE_H_
