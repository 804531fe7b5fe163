// Horizontal reductions of one 8-float AVX2 vector, shared by the CPU kernels that have AVX2
// paths (typed Linear, f32 Linear, attention). Each function carries its own target attribute
// and sits in an anonymous namespace, so a file compiled for baseline x86-64 can call it from
// its AVX2 functions, and no copy compiled for AVX2 can become the one the linker keeps for a
// caller on an older CPU (see quant_simd_util.h). The order of the additions is fixed: kernels
// that promise the same bits for a token alone or in a batch rely on it.
#ifndef KVSERVE_KERNELS_CPU_AVX2_REDUCE_H_
#define KVSERVE_KERNELS_CPU_AVX2_REDUCE_H_

#if defined(__x86_64__)
#include <immintrin.h>

namespace kvserve::kernels::cpu {
namespace {

// (v0 + v4) + (v2 + v6) + ((v1 + v5) + (v3 + v7)), lane by lane as written.
[[maybe_unused]] __attribute__((target("avx2,fma"))) float HorizontalSum(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_shuffle_ps(sum2, sum2, 1)));
}

[[maybe_unused]] __attribute__((target("avx2,fma"))) float HorizontalMax(__m256 v) {
  const __m128 max4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 max2 = _mm_max_ps(max4, _mm_movehl_ps(max4, max4));
  return _mm_cvtss_f32(_mm_max_ss(max2, _mm_shuffle_ps(max2, max2, 1)));
}

}  // namespace
}  // namespace kvserve::kernels::cpu

#endif  // defined(__x86_64__)
#endif  // KVSERVE_KERNELS_CPU_AVX2_REDUCE_H_
