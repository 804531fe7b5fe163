// Lane helpers shared by the AVX-512 kernels of quant_linear.h (quant_dot_avx512.cc,
// quant_tile_avx512.cc), on top of the AVX2-level loads of quant_simd_util.h. Include it only
// from files compiled for AVX-512: everything here is in an anonymous namespace, so each such
// file has its own copy and no other file can end up calling one (an inline function with
// external linkage compiled there could be the copy the linker keeps for the whole program, and
// fault on an older CPU).
#ifndef KVSERVE_KERNELS_CPU_QUANT_AVX512_UTIL_H_
#define KVSERVE_KERNELS_CPU_QUANT_AVX512_UTIL_H_

#include <immintrin.h>

#include "kernels/cpu/quant_simd_util.h"

namespace kvserve::kernels::cpu {
namespace {

__m512i Join(__m256i low, __m256i high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}
// Lanes 0-7 `low`, lanes 8-15 `high`.
__m512 JoinScalars(float low, float high) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(low), _mm512_set1_ps(high));
}

}  // namespace
}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_QUANT_AVX512_UTIL_H_
