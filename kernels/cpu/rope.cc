// Rotary position embedding, in place on q and k. The angle of pair i at position p is
// p * inv_freq[i] (computed in double, so long positions keep their precision).
#include <cmath>

#include "kernels/cpu/cpu_backend.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kMaxHeadDim = 512;

// Rotates every head of one token. cos_sin holds (cos, sin) of each pair's angle.
void RotateHeads(float* x /* [num_heads, head_dim] */, int num_heads, int head_dim, RopeStyle style,
                 const float* cos_sin /* [head_dim / 2, 2] */) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * head_dim;  // [head_dim]
    for (int i = 0; i < half; ++i) {
      // The pair's two indices: adjacent, or half a head apart.
      const int a = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const float c = cos_sin[2 * i];
      const float s = cos_sin[2 * i + 1];
      const float x0 = head[a];
      const float x1 = head[b];
      head[a] = x0 * c - x1 * s;
      head[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

void Rope(const RopeParams& p) {
  const int head_dim = p.config.head_dim;
  const int half = head_dim / 2;
  float inv_freq[kMaxHeadDim / 2];  // [half]
  float cos_sin[kMaxHeadDim];       // [half, 2]
  ComputeRopeInvFreq(p.config, inv_freq);
  const int64_t q_stride = p.q_token_stride();
  const int64_t k_stride = p.k_token_stride();
  for (int t = 0; t < p.num_tokens; ++t) {
    const double pos = p.positions[t];
    for (int i = 0; i < half; ++i) {
      const double angle = pos * static_cast<double>(inv_freq[i]);
      cos_sin[2 * i] = static_cast<float>(std::cos(angle));
      cos_sin[2 * i + 1] = static_cast<float>(std::sin(angle));
    }
    RotateHeads(p.q + t * q_stride, p.num_heads, head_dim, p.config.style, cos_sin);
    if (p.k != nullptr) {
      RotateHeads(p.k + t * k_stride, p.num_kv_heads, head_dim, p.config.style, cos_sin);
    }
  }
}

}  // namespace kvserve::kernels::cpu
