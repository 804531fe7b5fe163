// Paged attention on the CPU, flash-attention style: the keys of a sequence are streamed block
// by block through its block table, with an online (running max, running sum) softmax, so the
// scratch is independent of the context length.
//
// Work is split into items (sequence, KV head, tile of up to kQueryTile query tokens). An item
// handles all the query heads that share its KV head (GQA), so every K/V block it loads is used
// by group * tile query rows while it is hot in cache. Items run on the ThreadPool; the item
// table and each thread's tiles live in the caller's workspace. A cache stored in bf16 or f16 is
// widened block by block into the thread's tile (one K/V block of one head at a time, so every
// stored byte is read once per item) and the math stays fp32.
//
// With AVX-512 (head_dim % 16 == 0) a block's keys go 16 at a time into the lanes of one vector:
// a query row's 16 scores come out of one shared tree of shuffles instead of 16 horizontal sums,
// and its softmax update is one vector exp. With AVX2 (head_dim % 8 == 0) the same goes 8 keys at
// a time (paged_attention_avx2.cc, which also takes a prompt tile's query rows 8 at a time in
// vector lanes); elsewhere a portable loop. Every row takes the same operations in the same
// order whatever the rows beside it, so a token's attention does not depend on the batch it is
// computed in (prefill or decode; the migration of a request between workers relies on that).
// (Transposing each chunk of K once per item instead, for a plain FMA chain per row, measured
// 25-30% slower on 1k-token decode, where an item has only a KV head's few query rows.)
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_chunk.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_math.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kQueryTile = 16;
constexpr size_t kAlign = 64;
constexpr int64_t kCacheLineBytes = 64;

struct WorkItem {
  int32_t seq;
  int32_t kv_head;
  int32_t token_begin;  // first query token of the tile, an index into [0, num_tokens)
  int32_t token_end;
};

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Keys per row in the scores scratch: a block, or a chunk of the AVX-512 path.
int ScoreStride(int block_size) { return std::max(block_size, kChunkKeys); }

// Per-thread scratch, in floats, for rows = kQueryTile * group query rows.
size_t ThreadScratchFloats(int group, int head_dim, int block_size) {
  const size_t rows = static_cast<size_t>(kQueryTile) * group;
  // q, acc, scores, max, sum; then one K and one V block widened to fp32, and q transposed
  // (the AVX2 path).
  return rows * (3 * head_dim + ScoreStride(block_size) + 2) +
         2 * static_cast<size_t>(block_size) * head_dim;
}

size_t MaxItems(const AttentionShape& s) {
  const size_t tiles = static_cast<size_t>(s.max_num_seqs) + s.max_num_tokens / kQueryTile + 1;
  return tiles * s.num_kv_heads;
}

inline float Dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// One query row against one block of keys: the scores, then the online softmax's update of the
// row's running max, sum and accumulator.
struct RowUpdate {
  const float* q;  // [head_dim], pre-scaled
  const float* k;  // [valid, head_dim]
  const float* v;  // [valid, head_dim]
  int valid;       // keys of the block this row sees
  int head_dim;
  float* scores;  // [valid] scratch
  float* acc;     // [head_dim]
  float* row_max;
  float* row_sum;
};

// The part after the scores, shared by every instruction set: returns the correction factor
// the accumulator must be scaled by, and leaves the keys' weights in u.scores.
inline float SoftmaxWeights(const RowUpdate& u) {
  float block_max = *u.row_max;
  for (int key = 0; key < u.valid; ++key) block_max = std::max(block_max, u.scores[key]);
  const float correction = Correction(*u.row_max, block_max);
  float sum = *u.row_sum * correction;
#pragma omp simd reduction(+ : sum)
  for (int key = 0; key < u.valid; ++key) {
    u.scores[key] = ExpNonPositive(u.scores[key] - block_max);
    sum += u.scores[key];
  }
  *u.row_max = block_max;
  *u.row_sum = sum;
  return correction;
}

void UpdateRowGeneric(const RowUpdate& u) {
  for (int key = 0; key < u.valid; ++key)
    u.scores[key] = Dot(u.q, u.k + key * u.head_dim, u.head_dim);
  const float correction = SoftmaxWeights(u);
  for (int d = 0; d < u.head_dim; ++d) u.acc[d] *= correction;
  for (int key = 0; key < u.valid; ++key) {
    const float weight = u.scores[key];
    const float* vk = u.v + key * u.head_dim;
#pragma omp simd
    for (int d = 0; d < u.head_dim; ++d) u.acc[d] += weight * vk[d];
  }
}

#if defined(__x86_64__)
// The AVX-512 path (head_dim % 16 == 0; see the top of the file). Only these functions are
// compiled for AVX-512; they run where ActiveCpuIsa() says so.
// (GCC 12's AVX-512 intrinsics build their "undefined" vectors as `__m512 y = y;`, which
// -Wmaybe-uninitialized reports: not our code; see kernels/CMakeLists.txt.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Lane-wise sums of 16 vectors in one: halves of 256 bits, then of 128, then in-lane pairs twice
// (45 operations, where 16 separate reductions take ~130). Vector i's sum lands in lane
// SumLane(i), a 4 x 4 transposition of i (its own inverse).
constexpr int SumLane(int i) { return (i % 4) * 4 + i / 4; }

__attribute__((target("avx512f"))) __m512 SumEach16(const __m512* p) {
  __m512 s[8];
  for (int i = 0; i < 8; ++i) {
    s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0xEE));
  }
  __m512 t[4];
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(s[2 * i], s[2 * i + 1], 0xDD));
  }
  __m512 u[2];
  for (int i = 0; i < 2; ++i) {
    u[i] = _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x88),
                         _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xDD));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x88), _mm512_shuffle_ps(u[0], u[1], 0xDD));
}

// One row's scores against the chunk, key j in lane j (0 past c.keys): per key the products of
// 16-dimension slices in one FMA chain, then the 16 chains summed together.
__attribute__((target("avx512f,fma"))) __m512 ChunkScores(const ChunkUpdate& c, const float* q) {
  __m512 part[kChunkKeys];
  for (int i = 0; i < kChunkKeys; ++i) {
    const int key = SumLane(i);
    if (key >= c.keys) {
      part[i] = _mm512_setzero_ps();
      continue;
    }
    const float* k = c.k + static_cast<int64_t>(key) * c.head_dim;
    __m512 sum = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(k));
    for (int d = 16; d < c.head_dim; d += 16) {
      sum = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), sum);
    }
    part[i] = sum;
  }
  return SumEach16(part);
}

// The online softmax's update of one row by its chunk scores: its weights into weights[16]
// (0 past the keys it sees), its max and sum updated; returns the accumulator's correction.
__attribute__((target("avx512f,fma"))) float ChunkSoftmax(__m512 scores, int valid, float* weights,
                                                          float* row_max, float* row_sum) {
  const auto seen = static_cast<__mmask16>((1u << valid) - 1);
  const float chunk_max = _mm512_mask_reduce_max_ps(seen, scores);
  const float new_max = std::max(*row_max, chunk_max);
  // Keys it does not see go in as -inf (e^x then underflows; the mask below makes it 0): their
  // scores could exceed new_max, outside ExpNonPositive's domain.
  _mm512_storeu_ps(weights,
                   _mm512_mask_sub_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), seen,
                                      scores, _mm512_set1_ps(new_max)));
#pragma omp simd
  for (int key = 0; key < kChunkKeys; ++key) weights[key] = ExpNonPositive(weights[key]);
  const __m512 w = _mm512_maskz_mov_ps(seen, _mm512_loadu_ps(weights));
  _mm512_storeu_ps(weights, w);
  const float correction = Correction(*row_max, new_max);
  *row_max = new_max;
  *row_sum = *row_sum * correction + _mm512_reduce_add_ps(w);
  return correction;
}

__attribute__((target("avx512f,fma"))) void UpdateChunkAvx512(const ChunkUpdate& c) {
  for (int r = 0; r < c.rows; ++r) {
    const int valid = std::min(c.keys, c.visible + r / c.group);
    if (valid <= 0) continue;
    const float* q = c.q + static_cast<int64_t>(r) * c.head_dim;
    float* weights = c.weights + r * kChunkKeys;
    const __m512 correction = _mm512_set1_ps(
        ChunkSoftmax(ChunkScores(c, q), valid, weights, c.row_max + r, c.row_sum + r));
    float* acc = c.acc + static_cast<int64_t>(r) * c.head_dim;
    for (int d = 0; d < c.head_dim; d += 16) {
      __m512 a = _mm512_mul_ps(_mm512_loadu_ps(acc + d), correction);
      for (int key = 0; key < valid; ++key) {
        a = _mm512_fmadd_ps(_mm512_set1_ps(weights[key]),
                            _mm512_loadu_ps(c.v + static_cast<int64_t>(key) * c.head_dim + d), a);
      }
      _mm512_storeu_ps(acc + d, a);
    }
  }
}
#pragma GCC diagnostic pop
#endif

// A chunk update and the keys it takes at once; update null: the generic row update. prepare,
// where set, runs once per item before its first chunk and says whether its q_t is for the chunks.
struct ChunkPath {
  void (*update)(const ChunkUpdate&) = nullptr;
  int chunk_keys = 0;
  bool (*prepare)(const float* q, int rows, int head_dim, float* q_t) = nullptr;
};

// The widest vector path the CPU (ActiveCpuIsa) and head_dim allow. A token's attention thus
// depends on the machine's instruction set, never on the batch it comes in.
ChunkPath PickChunkPath(int head_dim) {
#if defined(__x86_64__)
  if (ActiveCpuIsa() >= CpuIsa::kAvx512 && head_dim % 16 == 0) {
    return {&UpdateChunkAvx512, kChunkKeys};
  }
  if (ActiveCpuIsa() >= CpuIsa::kAvx2 && head_dim % 8 == 0) {
    return {&UpdateChunkAvx2, kAvx2Keys, &PrepareAvx2};
  }
#endif
  return {};
}

// Attention of one item; scratch is this thread's ThreadScratchFloats() floats.
void RunItem(const PagedAttentionParams& p, const WorkItem& item, float* scratch,
             const ChunkPath& path) {
  const PagedKvView& c = p.cache;
  const int head_dim = c.head_dim;
  const int group = p.num_heads / c.num_kv_heads;
  const int64_t q_stride = p.q_token_stride();
  const int num_q = item.token_end - item.token_begin;
  const int rows = num_q * group;
  const int max_rows = kQueryTile * group;
  float* q = scratch;                    // [rows, head_dim], pre-scaled
  float* acc = q + max_rows * head_dim;  // [rows, head_dim]
  const int score_stride = ScoreStride(c.block_size);
  float* scores = acc + max_rows * head_dim;          // [rows, score_stride]
  float* row_max = scores + max_rows * score_stride;  // [rows]
  float* row_sum = row_max + max_rows;                // [rows]
  float* k_wide = row_sum + max_rows;                 // [block_size, head_dim], 16-bit caches
  float* v_wide = k_wide + c.block_size * head_dim;   // [block_size, head_dim], 16-bit caches
  float* q_t = v_wide + c.block_size * head_dim;      // [rows / 8][head_dim][8], AVX2
  const int64_t elem_bytes = GetDTypeInfo(c.dtype).block_bytes;

  // Position of the tile's first query token: the sequence's queries are its last n positions.
  const int32_t seq_begin = p.query_start[item.seq];
  const int32_t seq_len = p.query_start[item.seq + 1] - seq_begin;
  const int32_t first_pos = p.context_lens[item.seq] - seq_len + (item.token_begin - seq_begin);
  const int32_t num_keys = first_pos + num_q;  // keys the tile's last token sees

  for (int i = 0; i < num_q; ++i) {
    for (int j = 0; j < group; ++j) {
      const float* src = p.q + (item.token_begin + i) * q_stride +
                         static_cast<int64_t>(item.kv_head * group + j) * head_dim;
      float* dst = q + (i * group + j) * head_dim;
      for (int d = 0; d < head_dim; ++d) dst[d] = src[d] * p.scale;
    }
  }
  std::fill(acc, acc + rows * head_dim, 0.0f);
  std::fill(row_max, row_max + rows, -std::numeric_limits<float>::infinity());
  std::fill(row_sum, row_sum + rows, 0.0f);
  float* const chunk_q_t =
      path.prepare != nullptr && path.prepare(q, rows, head_dim, q_t) ? q_t : nullptr;

  const int32_t* block_table =
      p.block_tables + static_cast<int64_t>(item.seq) * p.max_blocks_per_seq;
  const int64_t head_block = static_cast<int64_t>(c.block_size) * head_dim;
  for (int32_t key_begin = 0; key_begin < num_keys; key_begin += c.block_size) {
    const int64_t block = block_table[key_begin / c.block_size];
    const int64_t base = KvRowOffset(c, block, item.kv_head, 0);
    const int block_keys = std::min<int>(c.block_size, num_keys - key_begin);  // the tile sees
    const float* k;  // [block_size, head_dim]
    const float* v;  // [block_size, head_dim]
    if (c.dtype == DType::kF32) {
      k = static_cast<const float*>(c.k) + base;
      v = static_cast<const float*>(c.v) + base;
    } else {
      DequantizeRow(static_cast<const char*>(c.k) + base * elem_bytes, c.dtype,
                    block_keys * head_dim, k_wide);
      DequantizeRow(static_cast<const char*>(c.v) + base * elem_bytes, c.dtype,
                    block_keys * head_dim, v_wide);
      k = k_wide;
      v = v_wide;
    }
    if (key_begin + c.block_size < num_keys) {
      // Blocks are scattered, so the hardware prefetcher stops at each block's end: fetch the
      // next block's K and V while this one is computed.
      const int64_t next = block_table[key_begin / c.block_size + 1];
      const int64_t next_base = KvRowOffset(c, next, item.kv_head, 0);
      const auto* k_next = static_cast<const char*>(c.k) + next_base * elem_bytes;
      const auto* v_next = static_cast<const char*>(c.v) + next_base * elem_bytes;
      for (int64_t at = 0; at < head_block * elem_bytes; at += kCacheLineBytes) {
        __builtin_prefetch(k_next + at);
        __builtin_prefetch(v_next + at);
      }
    }
    // Causal: token i (position first_pos + i) sees keys up to its own position.
    if (path.update != nullptr) {
      for (int c0 = 0; c0 < block_keys; c0 += path.chunk_keys) {
        path.update({k + c0 * head_dim, v + c0 * head_dim,
                     std::min(path.chunk_keys, block_keys - c0), first_pos + 1 - (key_begin + c0),
                     rows, group, head_dim, q, scores, acc, row_max, row_sum, chunk_q_t});
      }
      continue;
    }
    for (int i = 0; i < num_q; ++i) {
      const int valid = std::min(c.block_size, first_pos + i + 1 - key_begin);
      if (valid <= 0) continue;
      for (int j = 0; j < group; ++j) {
        const int r = i * group + j;
        UpdateRowGeneric({q + r * head_dim, k, v, valid, head_dim, scores + r * score_stride,
                          acc + r * head_dim, row_max + r, row_sum + r});
      }
    }
  }

  for (int i = 0; i < num_q; ++i) {
    for (int j = 0; j < group; ++j) {
      const int r = i * group + j;
      float* dst = p.out + (static_cast<int64_t>(item.token_begin + i) * p.num_heads +
                            item.kv_head * group + j) *
                               head_dim;
      const float inv_sum = row_sum[r] > 0.0f ? 1.0f / row_sum[r] : 0.0f;
      for (int d = 0; d < head_dim; ++d) dst[d] = acc[r * head_dim + d] * inv_sum;
    }
  }
}

}  // namespace

size_t AttentionWorkspaceBytes(const AttentionShape& shape, int num_threads) {
  const int group = shape.num_heads / shape.num_kv_heads;
  const size_t per_thread =
      AlignUp(sizeof(float) * ThreadScratchFloats(group, shape.head_dim, shape.block_size));
  return AlignUp(sizeof(WorkItem) * MaxItems(shape)) + per_thread * std::max(num_threads, 1);
}

void PagedAttention(const PagedAttentionParams& p, ThreadPool* pool) {
  const PagedKvView& c = p.cache;
  const int group = p.num_heads / c.num_kv_heads;
  auto* items = static_cast<WorkItem*>(p.workspace);
  int64_t num_items = 0;
  for (int s = 0; s < p.num_seqs; ++s) {
    for (int32_t t = p.query_start[s]; t < p.query_start[s + 1]; t += kQueryTile) {
      const int32_t end = std::min(t + kQueryTile, p.query_start[s + 1]);
      for (int h = 0; h < c.num_kv_heads; ++h) items[num_items++] = WorkItem{s, h, t, end};
    }
  }
  // The threads' tiles follow this call's item table (the plan sized both for the largest batch).
  char* tiles = static_cast<char*>(p.workspace) + AlignUp(sizeof(WorkItem) * num_items);
  const size_t per_thread =
      AlignUp(sizeof(float) * ThreadScratchFloats(group, c.head_dim, c.block_size));
  const ChunkPath path = PickChunkPath(c.head_dim);
  auto body = [&](int64_t i, int thread_index) {
    RunItem(p, items[i], reinterpret_cast<float*>(tiles + per_thread * thread_index), path);
  };
  if (pool != nullptr) {
    pool->ParallelFor(num_items, body);
  } else {
    for (int64_t i = 0; i < num_items; ++i) body(i, 0);
  }
}

}  // namespace kvserve::kernels::cpu
