// AVX2 conversions of half_linear.h (compiled with -mavx2 -mfma -mf16c; called only where the CPU
// has them). The AVX2 Linear kernel for 16-bit weights is dense_rows.h's.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/half_linear.h"

namespace kvserve::kernels::cpu {
void WidenHalfAvx2(const uint16_t* src, bool bf16, int64_t n, float* dst) {
  int64_t i = 0;
  if (bf16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
      _mm256_storeu_ps(dst + i,
                       _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16)));
    }
    for (; i < n; ++i) {
      const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
      std::memcpy(dst + i, &bits, 4);
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
    for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
  }
}

void NarrowHalfAvx2(const float* src, int64_t n, uint16_t* dst) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound));
  }
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], kRound);
}

}  // namespace kvserve::kernels::cpu
