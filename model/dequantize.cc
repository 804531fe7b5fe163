#include "model/dequantize.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

constexpr int kBlockSize = 32;

uint16_t LoadU16(const uint8_t* p) {
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

// Scale and min of Q4_K sub-block s (0..7) from the 12 packed bytes: sub-blocks 0-3 keep theirs
// in the low 6 bits of bytes s and s + 4; sub-blocks 4-7 in the nibbles of byte s + 4, with the
// top two bits in the spare high bits of bytes s - 4 and s.
void Q4KScaleMin(const uint8_t* packed, int s, int* scale, int* min) {
  if (s < 4) {
    *scale = packed[s] & 63;
    *min = packed[s + 4] & 63;
  } else {
    *scale = (packed[s + 4] & 0x0F) | ((packed[s - 4] >> 6) << 4);
    *min = (packed[s + 4] >> 4) | ((packed[s] >> 6) << 4);
  }
}

void DequantizeQ4KBlock(const uint8_t* block, float* out) {  // block: [144], out: [256]
  const float d = HalfToFloat(LoadU16(block));
  const float dmin = HalfToFloat(LoadU16(block + 2));
  const uint8_t* packed = block + 4;  // [12]
  const uint8_t* q = block + 16;      // [128]
  for (int chunk = 0; chunk < 4; ++chunk) {
    int scale_lo, min_lo, scale_hi, min_hi;
    Q4KScaleMin(packed, 2 * chunk, &scale_lo, &min_lo);
    Q4KScaleMin(packed, 2 * chunk + 1, &scale_hi, &min_hi);
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

float HalfToFloat(uint16_t half) {
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
  return std::bit_cast<float>(bits);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
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

float BFloat16ToFloat(uint16_t bf16) {
  return std::bit_cast<float>(static_cast<uint32_t>(bf16) << 16);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

absl::Status Dequantize(GgmlType type, const uint8_t* data, uint64_t num_bytes,
                        int64_t num_elements, float* out) {
  int64_t block_elements = 0, block_bytes = 0;
  if (!GgmlTypeBlock(type, &block_elements, &block_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot dequantize tensor type ", GgmlTypeName(type)));
  }
  if (num_elements < 0 || num_elements % block_elements != 0) {
    return absl::InvalidArgumentError(absl::StrCat(num_elements, " elements of ",
                                                   GgmlTypeName(type), " is not a whole number of ",
                                                   block_elements, "-element blocks"));
  }
  const int64_t num_blocks = num_elements / block_elements;
  if (num_bytes != static_cast<uint64_t>(num_blocks) * static_cast<uint64_t>(block_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(num_elements, " elements of ", GgmlTypeName(type), " take ",
                     num_blocks * block_bytes, " bytes, got ", num_bytes));
  }
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, data, num_bytes);
      break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < num_elements; ++i) out[i] = HalfToFloat(LoadU16(data + 2 * i));
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < num_elements; ++i) out[i] = BFloat16ToFloat(LoadU16(data + 2 * i));
      break;
    case GgmlType::kQ4_0:
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;  // [d: 2][nibbles: 16]
        DequantizeQ4Block<true>(block + 2, HalfToFloat(LoadU16(block)), 0.0f, out + b * kBlockSize);
      }
      break;
    case GgmlType::kQ4_1:
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;  // [d: 2][m: 2][nibbles: 16]
        DequantizeQ4Block<false>(block + 4, HalfToFloat(LoadU16(block)),
                                 HalfToFloat(LoadU16(block + 2)), out + b * kBlockSize);
      }
      break;
    case GgmlType::kQ8_0:
      for (int64_t b = 0; b < num_blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;  // [d: 2][int8: 32]
        const float scale = HalfToFloat(LoadU16(block));
        float* dst = out + b * kBlockSize;
        for (int j = 0; j < kBlockSize; ++j) {
          dst[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * scale;
        }
      }
      break;
    case GgmlType::kQ4_K:
      for (int64_t b = 0; b < num_blocks; ++b) {
        DequantizeQ4KBlock(data + b * block_bytes, out + b * block_elements);
      }
      break;
    case GgmlType::kQ6_K:
      for (int64_t b = 0; b < num_blocks; ++b) {
        DequantizeQ6KBlock(data + b * block_bytes, out + b * block_elements);
      }
      break;
  }
  return absl::OkStatus();
}

absl::Status DequantizeAll(const std::vector<DequantizeJob>& jobs, int num_threads) {
  num_threads = std::max(1, std::min<int>(num_threads, static_cast<int>(jobs.size())));
  // Largest first, each to the least-loaded thread: balanced enough for a model's tensors.
  std::vector<size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return jobs[a].num_elements > jobs[b].num_elements; });
  std::vector<std::vector<size_t>> assigned(num_threads);
  std::vector<int64_t> load(num_threads, 0);
  for (size_t index : order) {
    const int t = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    assigned[t].push_back(index);
    load[t] += jobs[index].num_elements + 1;
  }
  std::vector<absl::Status> status(num_threads);
  auto work = [&](int t) {
    for (size_t index : assigned[t]) {
      const DequantizeJob& job = jobs[index];
      job.out->resize(static_cast<size_t>(job.num_elements));
      absl::Status s =
          Dequantize(job.type, job.data, job.num_bytes, job.num_elements, job.out->data());
      if (!s.ok()) {
        status[t] = absl::Status(s.code(), absl::StrCat(job.name, ": ", s.message()));
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < num_threads; ++t) threads.emplace_back(work, t);
  work(0);
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace kvserve
