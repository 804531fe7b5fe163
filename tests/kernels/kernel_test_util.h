// Helpers shared by the kernel tests and benchmarks: seeded random tensors, a random mixed
// paged-attention batch with its plain (unpaged) K/V history, the naive reference of paged
// attention computed from that history, and the PagedAttentionParams of a batch. Host memory
// only (the params may point at device copies); header-only.
#ifndef KVSERVE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define KVSERVE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/kernels.h"

namespace kvserve::kernels::testing {

// n floats uniform in [lo, hi), never all zero.
inline std::vector<float> RandomFloats(size_t n, std::mt19937& rng, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// One sequence of a batch: context_len tokens in the cache after this step, of which the last
// num_query are this step's query tokens (num_query = 1: a decode; more: a prefill chunk).
struct SeqSpec {
  int32_t context_len;
  int32_t num_query;
};

struct PagedBatch {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int32_t num_blocks = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t num_tokens = 0;  // query tokens + padding tokens
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  std::vector<SeqSpec> seqs;
  std::vector<int32_t> query_start;           // [S + 1]
  std::vector<int32_t> context_lens;          // [S]
  std::vector<int32_t> block_tables;          // [S, max_blocks_per_seq], unused entries 0
  std::vector<int32_t> slot_mapping;          // [num_tokens], -1 for padding
  std::vector<int32_t> positions;             // [num_tokens], 0 for padding
  std::vector<float> q;                       // [num_tokens, num_heads, head_dim]
  std::vector<float> new_k;                   // [num_tokens, num_kv_heads, head_dim]
  std::vector<float> new_v;                   // [num_tokens, num_kv_heads, head_dim]
  std::vector<float> k_cache;                 // [num_blocks, num_kv_heads, block_size, head_dim]
  std::vector<float> v_cache;                 // same; holds the history, not yet the new tokens
  std::vector<std::vector<float>> k_history;  // per seq [context_len, num_kv_heads, head_dim]
  std::vector<std::vector<float>> v_history;
};

// A batch whose blocks come from a shuffled pool (block 0 stays the unused null block), whose
// old context is already in the cache and whose new tokens' K/V await a WriteKv through
// slot_mapping. num_padding tokens with slot -1 follow the real ones.
inline PagedBatch MakePagedBatch(const std::vector<SeqSpec>& seqs, int32_t num_heads,
                                 int32_t num_kv_heads, int32_t head_dim, int32_t block_size,
                                 int32_t num_padding, std::mt19937& rng) {
  PagedBatch b;
  b.num_heads = num_heads;
  b.num_kv_heads = num_kv_heads;
  b.head_dim = head_dim;
  b.block_size = block_size;
  b.seqs = seqs;
  int32_t total_blocks = 1;
  for (const SeqSpec& s : seqs) {
    const int32_t blocks = (s.context_len + block_size - 1) / block_size;
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, blocks);
    b.max_query_len = std::max(b.max_query_len, s.num_query);
    b.max_context_len = std::max(b.max_context_len, s.context_len);
    total_blocks += blocks;
  }
  b.num_blocks = total_blocks + 3;  // a few never used
  std::vector<int32_t> pool(b.num_blocks - 1);
  std::iota(pool.begin(), pool.end(), 1);
  std::shuffle(pool.begin(), pool.end(), rng);

  const int64_t head_floats = static_cast<int64_t>(num_kv_heads) * head_dim;
  b.k_cache = RandomFloats(static_cast<size_t>(b.num_blocks) * block_size * head_floats, rng);
  b.v_cache = RandomFloats(b.k_cache.size(), rng);
  b.query_start.push_back(0);
  b.block_tables.assign(seqs.size() * b.max_blocks_per_seq, 0);
  size_t next_block = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SeqSpec& spec = seqs[s];
    const int32_t blocks = (spec.context_len + block_size - 1) / block_size;
    for (int32_t i = 0; i < blocks; ++i) {
      b.block_tables[s * b.max_blocks_per_seq + i] = pool[next_block++];
    }
    b.k_history.push_back(RandomFloats(spec.context_len * head_floats, rng));
    b.v_history.push_back(RandomFloats(spec.context_len * head_floats, rng));
    for (int32_t pos = 0; pos < spec.context_len; ++pos) {
      const int32_t block = b.block_tables[s * b.max_blocks_per_seq + pos / block_size];
      const int32_t slot = block * block_size + pos % block_size;
      const bool is_query = pos >= spec.context_len - spec.num_query;
      for (int32_t h = 0; h < num_kv_heads; ++h) {
        const float* k = &b.k_history[s][(pos * num_kv_heads + h) * head_dim];
        const float* v = &b.v_history[s][(pos * num_kv_heads + h) * head_dim];
        if (is_query) {
          b.new_k.insert(b.new_k.end(), k, k + head_dim);
          b.new_v.insert(b.new_v.end(), v, v + head_dim);
        } else {
          const int64_t dst =
              ((static_cast<int64_t>(block) * num_kv_heads + h) * block_size + pos % block_size) *
              head_dim;
          std::copy(k, k + head_dim, b.k_cache.begin() + dst);
          std::copy(v, v + head_dim, b.v_cache.begin() + dst);
        }
      }
      if (is_query) {
        b.slot_mapping.push_back(slot);
        b.positions.push_back(pos);
      }
    }
    b.query_start.push_back(b.query_start.back() + spec.num_query);
    b.context_lens.push_back(spec.context_len);
  }
  for (int32_t i = 0; i < num_padding; ++i) {
    b.slot_mapping.push_back(-1);
    b.positions.push_back(0);
    std::vector<float> junk = RandomFloats(head_floats, rng);
    b.new_k.insert(b.new_k.end(), junk.begin(), junk.end());
    b.new_v.insert(b.new_v.end(), junk.begin(), junk.end());
  }
  b.num_tokens = b.query_start.back() + num_padding;
  b.q = RandomFloats(static_cast<size_t>(b.num_tokens) * num_heads * head_dim, rng);
  return b;
}

// Naive attention from the plain history, in double: out [num_tokens, num_heads, head_dim],
// padding rows left 0.
inline std::vector<float> ReferenceAttention(const PagedBatch& b, float scale) {
  const int32_t group = b.num_heads / b.num_kv_heads;
  const int32_t d = b.head_dim;
  std::vector<float> out(static_cast<size_t>(b.num_tokens) * b.num_heads * d, 0.0f);
  for (size_t s = 0; s < b.seqs.size(); ++s) {
    const SeqSpec& spec = b.seqs[s];
    for (int32_t i = 0; i < spec.num_query; ++i) {
      const int32_t t = b.query_start[s] + i;
      const int32_t pos = spec.context_len - spec.num_query + i;
      for (int32_t h = 0; h < b.num_heads; ++h) {
        const int32_t kvh = h / group;
        const float* q = &b.q[(static_cast<size_t>(t) * b.num_heads + h) * d];
        std::vector<double> scores(pos + 1);
        double max_score = -1e300;
        for (int32_t j = 0; j <= pos; ++j) {
          const float* k = &b.k_history[s][(j * b.num_kv_heads + kvh) * d];
          double dot = 0.0;
          for (int32_t x = 0; x < d; ++x) dot += static_cast<double>(q[x]) * k[x];
          scores[j] = dot * scale;
          max_score = std::max(max_score, scores[j]);
        }
        double sum = 0.0;
        for (double& sc : scores) sum += (sc = std::exp(sc - max_score));
        float* o = &out[(static_cast<size_t>(t) * b.num_heads + h) * d];
        for (int32_t x = 0; x < d; ++x) {
          double acc = 0.0;
          for (int32_t j = 0; j <= pos; ++j)
            acc += scores[j] * b.v_history[s][(j * b.num_kv_heads + kvh) * d + x];
          o[x] = static_cast<float>(acc / sum);
        }
      }
    }
  }
  return out;
}

// The query and metadata of an attention batch where a call reads them: a PagedBatch's own
// vectors (HostInputs) or copies of them on a device.
struct AttentionInputs {
  const float* q;               // [num_tokens, num_heads, head_dim]
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
};

// The sizes of an attention batch (PagedAttentionParams's fields of the same names).
struct AttentionSizes {
  int32_t num_tokens;
  int32_t num_seqs;
  int32_t num_heads;
  int32_t max_blocks_per_seq;
  int32_t max_query_len;
  int32_t max_context_len;
};

inline AttentionInputs HostInputs(const PagedBatch& b) {
  return {b.q.data(), b.query_start.data(), b.context_lens.data(), b.block_tables.data()};
}

inline AttentionSizes SizesOf(const PagedBatch& b) {
  return {b.num_tokens,    static_cast<int32_t>(b.seqs.size()),
          b.num_heads,     b.max_blocks_per_seq,
          b.max_query_len, b.max_context_len};
}

// Attention of the batch (in, sizes) over cache into out [num_tokens, num_heads, head_dim], with
// scale 1 / sqrt(head_dim), a dense q and workspace_bytes of workspace (nullptr and 0: none).
inline PagedAttentionParams MakeAttentionParams(const AttentionInputs& in,
                                                const AttentionSizes& sizes,
                                                const PagedKvView& cache, float* out,
                                                void* workspace, size_t workspace_bytes) {
  PagedAttentionParams p{};
  p.q = in.q;
  p.out = out;
  p.query_start = in.query_start;
  p.context_lens = in.context_lens;
  p.block_tables = in.block_tables;
  p.num_tokens = sizes.num_tokens;
  p.num_seqs = sizes.num_seqs;
  p.num_heads = sizes.num_heads;
  p.max_blocks_per_seq = sizes.max_blocks_per_seq;
  p.max_query_len = sizes.max_query_len;
  p.max_context_len = sizes.max_context_len;
  p.scale = 1.0f / std::sqrt(static_cast<float>(cache.head_dim));
  p.cache = cache;
  p.workspace = workspace;
  p.workspace_bytes = workspace_bytes;
  return p;
}

// The same for batch b as it is in host memory.
inline PagedAttentionParams MakeAttentionParams(const PagedBatch& b, const PagedKvView& cache,
                                                float* out, void* workspace,
                                                size_t workspace_bytes) {
  return MakeAttentionParams(HostInputs(b), SizesOf(b), cache, out, workspace, workspace_bytes);
}

}  // namespace kvserve::kernels::testing

#endif  // KVSERVE_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
