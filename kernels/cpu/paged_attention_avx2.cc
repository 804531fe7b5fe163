// The AVX2 chunk update of the CPU paged attention (attention_chunk.h; the plan and the item
// driver are in paged_attention.cc). The AVX-512 path's operations at half the width: a row's keys
// 8 at a time in the lanes of one vector, its scores from one tree of horizontal adds, its softmax
// one vector exp. A prompt's tile also takes its query rows 8 at a time in the lanes of a vector
// (queries transposed once per item, PrepareAvx2) wherever all 8 see a chunk's every key, two
// groups sharing a pass over the keys: scores as FMA chains against one broadcast key element, a
// softmax with no reduction inside a vector, each V load serving 4 rows. A row gets the same
// operations in the same order either way (FinishGroupAvx2 says how), so a token's attention is the
// same bits in a prefill and in a decode. Only these functions are compiled for AVX2 + FMA (target
// attributes; the file is built for the baseline).
#include "kernels/cpu/attention_chunk.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/avx2_reduce.h"
#include "kernels/cpu/cpu_math.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kAvx2Rows = 8;  // query rows per vector in the groups

// The AVX2 path (head_dim % 8 == 0): the AVX-512 path's operations at half the width, keys 8 at
// a time in the lanes of one vector. Only these functions are compiled for AVX2 + FMA.

// Lane i of the result is the sum of the lanes of p[i].
__attribute__((target("avx2,fma"))) __m256 SumEach8(const __m256* p) {
  const __m256 t0 = _mm256_hadd_ps(p[0], p[1]);
  const __m256 t1 = _mm256_hadd_ps(p[2], p[3]);
  const __m256 t2 = _mm256_hadd_ps(p[4], p[5]);
  const __m256 t3 = _mm256_hadd_ps(p[6], p[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [p0..p3 lanes 0-3 | p0..p3 lanes 4-7]
  const __m256 u1 = _mm256_hadd_ps(t2, t3);  // the same for p4..p7
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// One row's scores against the chunk (key j in lane j, 0 past c.keys): per key the products of
// 8-dimension slices in one FMA chain, then the 8 chains summed together.
__attribute__((target("avx2,fma"))) __m256 ChunkScoresAvx2(const ChunkUpdate& c, const float* q) {
  __m256 part[kAvx2Keys];
  for (int key = 0; key < kAvx2Keys; ++key) {
    if (key >= c.keys) {
      part[key] = _mm256_setzero_ps();
      continue;
    }
    const float* k = c.k + static_cast<int64_t>(key) * c.head_dim;
    __m256 sum = _mm256_mul_ps(_mm256_loadu_ps(q), _mm256_loadu_ps(k));
    for (int d = 8; d < c.head_dim; d += 8) {
      sum = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), sum);
    }
    part[key] = sum;
  }
  return SumEach8(part);
}

// w[i] = e^w[i] for 8 values <= 0 (or -inf). One out-of-line copy, so that a row alone and a
// group of rows get the same instructions, hence the same bits.
__attribute__((target("avx2,fma"), noinline)) void ExpEach8(float* w) {
#pragma omp simd
  for (int i = 0; i < kAvx2Keys; ++i) w[i] = ExpNonPositive(w[i]);
}

// The online softmax's update of row r by its chunk scores: its weights into weights[8] (0 past
// the keys it sees), its max and sum updated; returns the accumulator's correction.
__attribute__((target("avx2,fma"))) float ChunkSoftmaxAvx2(const ChunkUpdate& c, int r,
                                                           __m256 raw_scores, int valid,
                                                           float* weights) {
  const __m256 seen = _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  // Keys it does not see are -inf, so their weights are masked to 0.
  const __m256 scores =
      _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), raw_scores, seen);
  const float new_max = std::max(c.row_max[r], HorizontalMax(scores));
  _mm256_storeu_ps(weights, _mm256_sub_ps(scores, _mm256_set1_ps(new_max)));
  ExpEach8(weights);
  const __m256 w = _mm256_and_ps(_mm256_loadu_ps(weights), seen);
  _mm256_storeu_ps(weights, w);
  const float correction = Correction(c.row_max[r], new_max);
  c.row_max[r] = new_max;
  c.row_sum[r] = std::fma(c.row_sum[r], correction, HorizontalSum(w));
  return correction;
}

// Row r's accumulator scaled by its correction, then the weighted values of its `valid` keys.
__attribute__((target("avx2,fma"))) void ChunkValuesAvx2(const ChunkUpdate& c, int r, int valid,
                                                         const float* weights, float correction) {
  const __m256 scale = _mm256_set1_ps(correction);
  float* acc = c.acc + static_cast<int64_t>(r) * c.head_dim;
  for (int d = 0; d < c.head_dim; d += 8) {
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + d), scale);
    for (int key = 0; key < valid; ++key) {
      a = _mm256_fmadd_ps(_mm256_set1_ps(weights[key]),
                          _mm256_loadu_ps(c.v + static_cast<int64_t>(key) * c.head_dim + d), a);
    }
    _mm256_storeu_ps(acc + d, a);
  }
}

// Row r alone: its scores, softmax and values.
__attribute__((target("avx2,fma"))) void UpdateRowAvx2(const ChunkUpdate& c, int r, int valid) {
  float* weights = c.weights + r * kChunkKeys;
  const float correction = ChunkSoftmaxAvx2(
      c, r, ChunkScoresAvx2(c, c.q + static_cast<int64_t>(r) * c.head_dim), valid, weights);
  ChunkValuesAvx2(c, r, valid, weights, correction);
}

// 8 rows of src (rows src_stride floats apart) transposed into dst[d * 8 + row], d < cols
// (cols % 8 == 0), in 8 x 8 squares.
__attribute__((target("avx2,fma"))) void Transpose8Rows(const float* src, int64_t src_stride,
                                                        int cols, float* dst) {
  for (int d = 0; d < cols; d += 8) {
    __m256 r[kAvx2Rows];
    for (int i = 0; i < kAvx2Rows; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride + d);
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    float* out = dst + static_cast<int64_t>(d) * kAvx2Rows;
    _mm256_storeu_ps(out + 0 * kAvx2Rows, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps(out + 1 * kAvx2Rows, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps(out + 2 * kAvx2Rows, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps(out + 3 * kAvx2Rows, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps(out + 4 * kAvx2Rows, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps(out + 5 * kAvx2Rows, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps(out + 6 * kAvx2Rows, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps(out + 7 * kAvx2Rows, _mm256_permute2f128_ps(u3, u7, 0x31));
  }
}

// The FMA chains of kGroups groups of 8 rows from r0 against the chunk: chain[g][e][k], lane i
// being row r0 + 8g + i's chain over dimensions e, e + 8, ... with key k. Two groups take the
// keys 4 at a time, so each broadcast key element serves 16 rows.
template <int kGroups>
__attribute__((target("avx2,fma"))) void GroupChains(const ChunkUpdate& c, int r0,
                                                     __m256 (*chain)[kAvx2Keys][kAvx2Keys]) {
  constexpr int kKeys = kGroups == 1 ? kAvx2Keys : kAvx2Keys / 2;   // keys per pass
  const float* qt = c.q_t + static_cast<int64_t>(r0) * c.head_dim;  // [groups][head_dim][8]
  const int64_t group_stride = static_cast<int64_t>(kAvx2Rows) * c.head_dim;
  for (int k0 = 0; k0 < kAvx2Keys; k0 += kKeys) {
    const float* kb = c.k + static_cast<int64_t>(k0) * c.head_dim;
    for (int e = 0; e < kAvx2Keys; ++e) {
      __m256 acc[kGroups][kKeys];
#pragma GCC unroll 2
      for (int g = 0; g < kGroups; ++g) {
        const __m256 q = _mm256_loadu_ps(qt + g * group_stride + e * kAvx2Rows);
#pragma GCC unroll 8
        for (int k = 0; k < kKeys; ++k) {
          acc[g][k] = _mm256_mul_ps(q, _mm256_broadcast_ss(kb + k * c.head_dim + e));
        }
      }
      for (int d = e + 8; d < c.head_dim; d += 8) {
        __m256 q[kGroups];
#pragma GCC unroll 2
        for (int g = 0; g < kGroups; ++g) {
          q[g] = _mm256_loadu_ps(qt + g * group_stride + static_cast<int64_t>(d) * kAvx2Rows);
        }
#pragma GCC unroll 8
        for (int k = 0; k < kKeys; ++k) {
          const __m256 key = _mm256_broadcast_ss(kb + k * c.head_dim + d);
#pragma GCC unroll 2
          for (int g = 0; g < kGroups; ++g) acc[g][k] = _mm256_fmadd_ps(q[g], key, acc[g][k]);
        }
      }
#pragma GCC unroll 2
      for (int g = 0; g < kGroups; ++g) {
#pragma GCC unroll 8
        for (int k = 0; k < kKeys; ++k) chain[g][e][k0 + k] = acc[g][k];
      }
    }
  }
}

// Rows [r0, r0 + 8) together, where all of them see all c.keys keys of the chunk, from their
// chains (GroupChains): the rows in the lanes, so the softmax is vertical across keys with no
// reduction inside a vector. Each row gets the operations of UpdateRowAvx2, in the same order:
// lane e of a key's chain there is the chain over dimensions e, e + 8, ... here; SumEach8's tree,
// ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)), is summed across the chains; the max is
// exact; the weights go through ExpEach8; their sum is HorizontalSum's tree across keys,
// ((w0 + w4) + (w2 + w6)) + ((w1 + w5) + (w3 + w7)).
__attribute__((target("avx2,fma"))) void FinishGroupAvx2(
    const ChunkUpdate& c, int r0, const __m256 (&chain)[kAvx2Keys][kAvx2Keys]) {
  // The scores (keys past c.keys were read as the next block's or the scratch's keys: unused).
  __m256 scores[kAvx2Keys];
  __m256 new_max = _mm256_loadu_ps(c.row_max + r0);
  const __m256 old_max = new_max;
  for (int k = 0; k < c.keys; ++k) {
    const __m256 low = _mm256_add_ps(_mm256_add_ps(chain[0][k], chain[1][k]),
                                     _mm256_add_ps(chain[2][k], chain[3][k]));
    const __m256 high = _mm256_add_ps(_mm256_add_ps(chain[4][k], chain[5][k]),
                                      _mm256_add_ps(chain[6][k], chain[7][k]));
    scores[k] = _mm256_add_ps(low, high);
    new_max = _mm256_max_ps(new_max, scores[k]);
  }
  // Weights [key][row] into the rows' weights scratch, read by the values below.
  float* weights = c.weights + r0 * kChunkKeys;
  __m256 w[kAvx2Keys];
  for (int k = 0; k < kAvx2Keys; ++k) {
    if (k < c.keys) {
      _mm256_storeu_ps(weights + k * kAvx2Rows, _mm256_sub_ps(scores[k], new_max));
      ExpEach8(weights + k * kAvx2Rows);
      w[k] = _mm256_loadu_ps(weights + k * kAvx2Rows);
    } else {
      w[k] = _mm256_setzero_ps();
    }
  }
  const __m256 sum =
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(w[0], w[4]), _mm256_add_ps(w[2], w[6])),
                    _mm256_add_ps(_mm256_add_ps(w[1], w[5]), _mm256_add_ps(w[3], w[7])));
  alignas(32) float old_lanes[kAvx2Rows], new_lanes[kAvx2Rows], correction[kAvx2Rows];
  _mm256_store_ps(old_lanes, old_max);
  _mm256_store_ps(new_lanes, new_max);
  for (int i = 0; i < kAvx2Rows; ++i) correction[i] = Correction(old_lanes[i], new_lanes[i]);
  const __m256 scale = _mm256_load_ps(correction);
  _mm256_storeu_ps(c.row_max + r0, new_max);
  _mm256_storeu_ps(c.row_sum + r0, _mm256_fmadd_ps(_mm256_loadu_ps(c.row_sum + r0), scale, sum));
  // The values, 4 rows x 16 dimensions at a time: each V load serves 4 rows.
  constexpr int kRows = 4;
  for (int half = 0; half < kAvx2Rows; half += kRows) {
    float* acc = c.acc + static_cast<int64_t>(r0 + half) * c.head_dim;
    const float* wh = weights + half;  // row i's weight of key k at wh[k * 8 + i]
    __m256 s[kRows];
#pragma GCC unroll 4
    for (int i = 0; i < kRows; ++i) s[i] = _mm256_set1_ps(correction[half + i]);
    int d = 0;
    for (; d + 16 <= c.head_dim; d += 16) {
      __m256 a0[kRows], a1[kRows];
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i) {
        a0[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + i * c.head_dim + d), s[i]);
        a1[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + i * c.head_dim + d + 8), s[i]);
      }
      for (int k = 0; k < c.keys; ++k) {
        const float* v = c.v + static_cast<int64_t>(k) * c.head_dim + d;
        const __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
#pragma GCC unroll 4
        for (int i = 0; i < kRows; ++i) {
          const __m256 wk = _mm256_broadcast_ss(wh + k * kAvx2Rows + i);
          a0[i] = _mm256_fmadd_ps(wk, v0, a0[i]);
          a1[i] = _mm256_fmadd_ps(wk, v1, a1[i]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < kRows; ++i) {
        _mm256_storeu_ps(acc + i * c.head_dim + d, a0[i]);
        _mm256_storeu_ps(acc + i * c.head_dim + d + 8, a1[i]);
      }
    }
    for (; d < c.head_dim; d += 8) {
      for (int i = 0; i < kRows; ++i) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + i * c.head_dim + d), s[i]);
        for (int k = 0; k < c.keys; ++k) {
          a = _mm256_fmadd_ps(_mm256_broadcast_ss(wh + k * kAvx2Rows + i),
                              _mm256_loadu_ps(c.v + static_cast<int64_t>(k) * c.head_dim + d), a);
        }
        _mm256_storeu_ps(acc + i * c.head_dim + d, a);
      }
    }
  }
}

// One group of 8 rows from r0, or two (r0 and r0 + 8), that all see the chunk's every key.
template <int kGroups>
__attribute__((target("avx2,fma"))) void UpdateGroupsAvx2(const ChunkUpdate& c, int r0) {
  __m256 chain[kGroups][kAvx2Keys][kAvx2Keys];
  GroupChains<kGroups>(c, r0, chain);
  for (int g = 0; g < kGroups; ++g) FinishGroupAvx2(c, r0 + g * kAvx2Rows, chain[g]);
}

}  // namespace

__attribute__((target("avx2,fma"))) bool PrepareAvx2(const float* q, int rows, int head_dim,
                                                     float* q_t) {
  for (int g = 0; g < rows / kAvx2Rows; ++g) {
    Transpose8Rows(q + static_cast<int64_t>(g) * kAvx2Rows * head_dim, head_dim, head_dim,
                   q_t + static_cast<int64_t>(g) * kAvx2Rows * head_dim);
  }
  return rows >= kAvx2Rows;
}

// A decode's few rows go one at a time; a prompt's tile takes whole groups of 8 rows together
// (PrepareAvx2 has transposed them) wherever all 8 see the whole chunk, and the rest one at a
// time. The same bits either way (see FinishGroupAvx2).
__attribute__((target("avx2,fma"))) void UpdateChunkAvx2(const ChunkUpdate& c) {
  auto valid_of = [&c](int r) { return std::min(c.keys, c.visible + r / c.group); };
  auto row = [&](int r) {
    const int valid = valid_of(r);
    if (valid > 0) UpdateRowAvx2(c, r, valid);
  };
  int r = 0;
  if (c.q_t != nullptr) {
    while (r + kAvx2Rows <= c.rows) {
      // valid_of does not fall as r grows: if a group's first row sees the whole chunk, all do.
      if (valid_of(r) != c.keys) {
        for (int i = r; i < r + kAvx2Rows; ++i) row(i);
        r += kAvx2Rows;
      } else if (r + 2 * kAvx2Rows <= c.rows) {
        UpdateGroupsAvx2<2>(c, r);
        r += 2 * kAvx2Rows;
      } else {
        UpdateGroupsAvx2<1>(c, r);
        r += kAvx2Rows;
      }
    }
  }
  for (; r < c.rows; ++r) row(r);
}

}  // namespace kvserve::kernels::cpu

#endif  // defined(__x86_64__)
