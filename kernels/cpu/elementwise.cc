// The CPU kernels that touch each element once: embedding, norms, KV write, SiLU-and-mul,
// gather, argmax. Plain loops; the compiler vectorises the inner ones.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/cpu_math.h"
#include "kernels/cpu/dense_panels.h"
#include "kernels/cpu/half_linear.h"

namespace kvserve::kernels::cpu {
namespace {

// out = x / rms(x) * weight over one row of n floats. out may alias x.
void RmsNormRow(const float* x /* [n] */, const float* weight /* [n] */, float* out /* [n] */,
                int n, float eps) {
  float sum_sq = 0.0f;
#pragma omp simd reduction(+ : sum_sq)
  for (int i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv_rms * weight[i];
}

void SiluAndMulRows(const float* gate, const float* up, float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

// The same loop compiled for AVX-512 (only this function: an inline function of a shared header
// is inlined here, never emitted for AVX-512 where another file could call it).
__attribute__((target("avx512f,fma"))) void SiluAndMulRowsAvx512(const float* gate, const float* up,
                                                                 float* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

// CpuBackend's elementwise kernels: a step's tokens in items of kTokensPerItem over the pool, or
// all on the calling thread when there are too few for the pool's hand-off to pay.
constexpr int32_t kTokensPerItem = 8;

template <typename Fn>  // fn(first token, token count)
void SplitTokens(ThreadPool& pool, int32_t num_tokens, const Fn& fn) {
  if (num_tokens < 2 * kTokensPerItem || pool.num_threads() == 1) {
    fn(0, num_tokens);
    return;
  }
  pool.ParallelFor((num_tokens + kTokensPerItem - 1) / kTokensPerItem, [&](int64_t item, int) {
    const auto first = static_cast<int32_t>(item * kTokensPerItem);
    fn(first, std::min(kTokensPerItem, num_tokens - first));
  });
}

}  // namespace

void NarrowRow(const float* src, DType dtype, int64_t n, void* dst) {
  auto* bits = static_cast<uint16_t*>(dst);
  switch (dtype) {
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) bits[i] = FloatToBFloat16(src[i]);
      return;
    case DType::kF16:
      if (ActiveCpuIsa() >= CpuIsa::kAvx2) {
        NarrowHalfAvx2(src, n, bits);
        return;
      }
      for (int64_t i = 0; i < n; ++i) bits[i] = FloatToHalf(src[i]);
      return;
    default:  // kF32: caches are never block-quantized
      std::memcpy(dst, src, sizeof(float) * n);
      return;
  }
}

void Embedding(const EmbeddingParams& p) {
  if (p.table_packed) {
    for (int t = 0; t < p.num_tokens; ++t) {
      DensePanelsRow(p.table, p.table_dtype, p.hidden, p.ids[t],
                     p.out + static_cast<int64_t>(t) * p.hidden);
    }
    return;
  }
  const int64_t row_bytes = RowBytes(p.table_dtype, p.hidden);
  for (int t = 0; t < p.num_tokens; ++t) {
    const void* row = static_cast<const char*>(p.table) + p.ids[t] * row_bytes;
    DequantizeRow(row, p.table_dtype, p.hidden, p.out + static_cast<int64_t>(t) * p.hidden);
  }
}

void RmsNorm(const RmsNormParams& p) {
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t row = static_cast<int64_t>(t) * p.hidden;
    RmsNormRow(p.x + row, p.weight, p.out + row, p.hidden, p.eps);
  }
}

void AddRmsNorm(const AddRmsNormParams& p) {
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t row = static_cast<int64_t>(t) * p.hidden;
    float* residual = p.residual + row;  // [hidden]
    const float* x = p.x + row;          // [hidden]
    for (int i = 0; i < p.hidden; ++i) residual[i] += x[i];
    RmsNormRow(residual, p.weight, p.out + row, p.hidden, p.eps);
  }
}

void WriteKv(const KvWriteParams& p) {
  const PagedKvView& c = p.cache;
  const int64_t k_stride = p.k_token_stride();
  const int64_t v_stride = p.v_token_stride();
  const int64_t elem_bytes = GetDTypeInfo(c.dtype).block_bytes;
  for (int t = 0; t < p.num_tokens; ++t) {
    const int32_t slot = p.slot_mapping[t];
    if (slot < 0) continue;  // padding
    const int64_t block = slot / c.block_size;
    const int32_t offset = slot % c.block_size;
    for (int h = 0; h < c.num_kv_heads; ++h) {
      const int64_t dst = KvRowOffset(c, block, h, offset) * elem_bytes;
      NarrowRow(p.k + t * k_stride + h * c.head_dim, c.dtype, c.head_dim,
                static_cast<char*>(c.k) + dst);
      NarrowRow(p.v + t * v_stride + h * c.head_dim, c.dtype, c.head_dim,
                static_cast<char*>(c.v) + dst);
    }
  }
}

void SiluAndMul(const SiluAndMulParams& p) {
  const int64_t n = static_cast<int64_t>(p.num_tokens) * p.intermediate;
  if (ActiveCpuIsa() >= CpuIsa::kAvx512) {
    SiluAndMulRowsAvx512(p.gate, p.up, p.out, n);
  } else {
    SiluAndMulRows(p.gate, p.up, p.out, n);
  }
}

void GatherRows(const GatherRowsParams& p) {
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(p.cols);
  for (int r = 0; r < p.num_rows; ++r) {
    std::memcpy(p.dst + static_cast<int64_t>(r) * p.cols,
                p.src + static_cast<int64_t>(p.rows[r]) * p.cols, row_bytes);
  }
}

void Argmax(const ArgmaxParams& p) {
  for (int r = 0; r < p.num_rows; ++r) {
    const float* logits = p.logits + static_cast<int64_t>(r) * p.vocab;  // [vocab]
    // Two vectorisable passes (the maximum, then its first index) instead of one compare chain:
    // the same answer, the first index of the largest value (NaNs never win, as in a > chain).
    float best_value = logits[0];
    if (best_value != best_value) {  // NaN first: nothing compares greater
      p.ids[r] = 0;
      continue;
    }
#pragma omp simd reduction(max : best_value)
    for (int32_t v = 1; v < p.vocab; ++v)
      best_value = logits[v] > best_value ? logits[v] : best_value;
    int32_t best = 0;
    for (int32_t v = 0; v < p.vocab; ++v) {
      if (logits[v] == best_value) {
        best = v;
        break;
      }
    }
    p.ids[r] = best;
  }
}

void CpuBackend::RmsNorm(const RmsNormParams& p) {
  SplitTokens(pool_, p.num_tokens, [&](int32_t first, int32_t count) {
    const int64_t offset = int64_t{first} * p.hidden;
    cpu::RmsNorm({p.x + offset, p.weight, p.out + offset, count, p.hidden, p.eps});
  });
}

void CpuBackend::AddRmsNorm(const AddRmsNormParams& p) {
  SplitTokens(pool_, p.num_tokens, [&](int32_t first, int32_t count) {
    const int64_t offset = int64_t{first} * p.hidden;
    cpu::AddRmsNorm(
        {p.residual + offset, p.x + offset, p.weight, p.out + offset, count, p.hidden, p.eps});
  });
}

void CpuBackend::SiluAndMul(const SiluAndMulParams& p) {
  SplitTokens(pool_, p.num_tokens, [&](int32_t first, int32_t count) {
    const int64_t offset = int64_t{first} * p.intermediate;
    cpu::SiluAndMul({p.gate + offset, p.up + offset, p.out + offset, count, p.intermediate});
  });
}

void CpuBackend::WriteKv(const KvWriteParams& p) {
  const int64_t k_stride = p.k_token_stride();
  const int64_t v_stride = p.v_token_stride();
  SplitTokens(pool_, p.num_tokens, [&](int32_t first, int32_t count) {
    KvWriteParams part = p;
    part.k += first * k_stride;
    part.v += first * v_stride;
    part.slot_mapping += first;
    part.num_tokens = count;
    part.k_stride = k_stride;
    part.v_stride = v_stride;
    cpu::WriteKv(part);
  });
}

void CpuBackend::Rope(const RopeParams& p) {
  const int half = p.config.head_dim / 2;
  float inv_freq[256];  // RopeConfig: head_dim <= 512
  ComputeRopeInvFreq(p.config, inv_freq);
  if (!std::equal(inv_freq, inv_freq + half, rope_inv_freq_.begin(), rope_inv_freq_.end()) ||
      !std::equal(p.positions, p.positions + p.num_tokens, rope_positions_.begin(),
                  rope_positions_.end())) {
    rope_inv_freq_.assign(inv_freq, inv_freq + half);
    rope_positions_.assign(p.positions, p.positions + p.num_tokens);
    rope_cos_.resize(size_t{1} * p.num_tokens * half);
    rope_sin_.resize(size_t{1} * p.num_tokens * half);
    SplitTokens(pool_, p.num_tokens, [&](int32_t first, int32_t count) {
      cpu::RopeTable(inv_freq, half, p.positions + first, count,
                     rope_cos_.data() + int64_t{first} * half,
                     rope_sin_.data() + int64_t{first} * half);
    });
  }
  const int64_t q_stride = p.q_token_stride();
  const int64_t k_stride = p.k_token_stride();
  SplitTokens(pool_, p.num_tokens, [&](int32_t first, int32_t count) {
    RopeParams part = p;
    part.q += first * q_stride;
    if (part.k != nullptr) part.k += first * k_stride;
    part.positions += first;
    part.num_tokens = count;
    part.q_stride = q_stride;
    part.k_stride = k_stride;
    cpu::RopeFromTable(part, rope_cos_.data() + int64_t{first} * half,
                       rope_sin_.data() + int64_t{first} * half);
  });
}

}  // namespace kvserve::kernels::cpu
