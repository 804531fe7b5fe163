// The chunk update of the CPU paged attention (paged_attention.cc): the state one chunk of keys
// updates for every query row of an item, and the instruction-set paths that do it. Internal to
// kernels/cpu; the AVX2 path is in paged_attention_avx2.cc, compiled for the baseline with its
// functions marked for AVX2 + FMA, and runs only where ActiveCpuIsa() says so.
#ifndef KVSERVE_KERNELS_CPU_ATTENTION_CHUNK_H_
#define KVSERVE_KERNELS_CPU_ATTENTION_CHUNK_H_

#include <cmath>
#include <cstdint>

namespace kvserve::kernels::cpu {

constexpr int kChunkKeys = 16;  // keys per vector in the AVX-512 path; the weights' row stride
constexpr int kAvx2Keys = 8;    // keys per vector in the AVX2 path

// One chunk of keys (16 on AVX-512, 8 on AVX2) against every query row of an item.
struct ChunkUpdate {
  const float* k;  // [keys, head_dim]
  const float* v;  // [keys, head_dim]
  int keys;        // keys in the chunk, 1..the path's chunk
  int visible;     // keys of the chunk the item's first query token sees (may be <= 0)
  int rows;        // query rows: token i's rows are [i * group, (i + 1) * group)
  int group;
  int head_dim;
  const float* q;  // [rows, head_dim], pre-scaled
  float* weights;  // [rows, kChunkKeys] scratch
  float* acc;      // [rows, head_dim]
  float* row_max;  // [rows]
  float* row_sum;  // [rows]
  float* q_t;      // the AVX2 path's whole groups of 8 rows, [rows / 8][head_dim][8]; nullptr
                   // when there are none
};

// The online softmax's factor for a row's accumulator and sum when its max goes from old_max to
// new_max (0 from -inf, the first keys). exp(0) is exactly 1, so a max that stays skips the exp.
inline float Correction(float old_max, float new_max) {
  return old_max == new_max ? 1.0f : std::exp(old_max - new_max);
}

// The AVX2 chunk update (head_dim % 8 == 0; see paged_attention_avx2.cc).
void UpdateChunkAvx2(const ChunkUpdate& c);
// Once per item before its first chunk: the AVX2 path's whole groups of 8 query rows of q
// ([rows, head_dim]) transposed into q_t ([rows / 8][head_dim][8]). Returns whether there was a
// whole group (else q_t is not written and the chunks get q_t = nullptr).
bool PrepareAvx2(const float* q, int rows, int head_dim, float* q_t);

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_ATTENTION_CHUNK_H_
