// Rotary position embedding, in place on q and k. The angle of pair i at position p is
// p * inv_freq[i] (computed in double, so long positions keep their precision).
#include <cmath>

#include "kernels/cpu/cpu_backend.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kMaxHeadDim = 512;

// Rotates every head of one token by the angles whose cosines and sines are cos[i], sin[i]. One
// loop per style, each over contiguous pairs' halves, so both vectorise.
void RotateHeads(float* x /* [num_heads, head_dim] */, int num_heads, int head_dim, RopeStyle style,
                 const float* cos /* [head_dim / 2] */, const float* sin /* [head_dim / 2] */) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * head_dim;  // [head_dim]
    if (style == RopeStyle::kInterleaved) {                // pairs (2i, 2i + 1)
      for (int i = 0; i < half; ++i) {
        const float x0 = head[2 * i];
        const float x1 = head[2 * i + 1];
        head[2 * i] = x0 * cos[i] - x1 * sin[i];
        head[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
      }
    } else {  // pairs (i, i + half)
      float* lo = head;
      float* hi = head + half;
      for (int i = 0; i < half; ++i) {
        const float x0 = lo[i];
        const float x1 = hi[i];
        lo[i] = x0 * cos[i] - x1 * sin[i];
        hi[i] = x0 * sin[i] + x1 * cos[i];
      }
    }
  }
}

}  // namespace

void RopeTable(const float* inv_freq, int half, const int32_t* positions, int32_t num_tokens,
               float* cos /* [num_tokens, half] */, float* sin /* [num_tokens, half] */) {
  for (int32_t t = 0; t < num_tokens; ++t) {
    const double pos = positions[t];
    for (int i = 0; i < half; ++i) {
      const double angle = pos * static_cast<double>(inv_freq[i]);
      cos[int64_t{t} * half + i] = static_cast<float>(std::cos(angle));
      sin[int64_t{t} * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void RopeFromTable(const RopeParams& p, const float* cos, const float* sin) {
  const int head_dim = p.config.head_dim;
  const int half = head_dim / 2;
  const int64_t q_stride = p.q_token_stride();
  const int64_t k_stride = p.k_token_stride();
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    const float* c = cos + int64_t{t} * half;
    const float* s = sin + int64_t{t} * half;
    RotateHeads(p.q + t * q_stride, p.num_heads, head_dim, p.config.style, c, s);
    if (p.k != nullptr) {
      RotateHeads(p.k + t * k_stride, p.num_kv_heads, head_dim, p.config.style, c, s);
    }
  }
}

void Rope(const RopeParams& p) {
  const int half = p.config.head_dim / 2;
  float inv_freq[kMaxHeadDim / 2];
  ComputeRopeInvFreq(p.config, inv_freq);
  float cos[kMaxHeadDim / 2];  // one token's
  float sin[kMaxHeadDim / 2];
  for (int32_t t = 0; t < p.num_tokens; ++t) {
    RopeParams token = p;
    token.q += t * p.q_token_stride();
    if (token.k != nullptr) token.k += t * p.k_token_stride();
    token.q_stride = p.q_token_stride();
    token.k_stride = p.k_token_stride();
    token.positions += t;
    token.num_tokens = 1;
    RopeTable(inv_freq, half, token.positions, 1, cos, sin);
    RopeFromTable(token, cos, sin);
  }
}

}  // namespace kvserve::kernels::cpu
