// Loads and nibble helpers shared by the SIMD kernels of quant_linear.h (AVX2 + F16C level:
// quant_dot_avx2.cc, and through quant_avx512_util.h the AVX-512 files). Include it only from
// files compiled for at least AVX2: everything here is in an anonymous namespace, so each such
// file has its own copy and no other file can end up calling one (an inline function with
// external linkage compiled there could be the copy the linker keeps for the whole program, and
// fault on an older CPU). They are [[maybe_unused]]: each file takes the ones it needs.
#ifndef KVSERVE_KERNELS_CPU_QUANT_SIMD_UTIL_H_
#define KVSERVE_KERNELS_CPU_QUANT_SIMD_UTIL_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvserve::kernels::cpu {
namespace {

[[maybe_unused]] float LoadHalf(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}
[[maybe_unused]] __m256i Load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
[[maybe_unused]] __m256i LowNibbles(__m256i bytes) {
  return _mm256_and_si256(bytes, _mm256_set1_epi8(0x0F));
}
[[maybe_unused]] __m256i HighNibbles(__m256i bytes) {
  return _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0F));
}
// 16 nibble bytes -> 32 values: the low nibbles first, then the high ones (Q4_0 / Q4_1 order).
[[maybe_unused]] __m256i SplitNibbles(const uint8_t* nibbles /* [16] */) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles));
  const __m128i mask = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), mask),
                          _mm_and_si128(bytes, mask));
}

}  // namespace
}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_QUANT_SIMD_UTIL_H_
