// Branch-free float functions that a loop over a row vectorises (std::exp is a call per element),
// shared by the CPU kernels (attention's softmax, SiLU). Not for the files compiled with -mavx*:
// an inline function compiled there could be the copy the linker keeps for the whole program.
#ifndef KVSERVE_KERNELS_CPU_CPU_MATH_H_
#define KVSERVE_KERNELS_CPU_CPU_MATH_H_

#include <cstdint>
#include <cstring>

namespace kvserve::kernels::cpu {

// e^x for x <= 0: x = n ln2 + r with |r| <= ln2 / 2, e^r by the classic degree-6 minimax
// polynomial, 2^n put in the exponent bits; to ~2 ulp. Below -87 (e^x < 2^-125) it returns
// e^-87.
inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to integer
  const float n = (x * 1.44269504089f + kRound) - kRound;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 = 0.693359375 - 2.12e-4
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// x * sigmoid(x) = x / (1 + e^-x), through e^-|x| (never overflows): sigmoid(x) = 1 / (1 + e) for
// x >= 0, e / (1 + e) below, with e = e^-|x|.
inline float Silu(float x) {
  const float e = ExpNonPositive(x < 0.0f ? x : -x);
  const float sigmoid = (x >= 0.0f ? 1.0f : e) / (1.0f + e);
  return x * sigmoid;
}

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_CPU_MATH_H_
