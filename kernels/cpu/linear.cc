// Linear layer on OpenBLAS: Y = X W^T with W row-major [out, in], so W is used transposed in
// place (no copy). OpenBLAS threads itself (OPENBLAS_NUM_THREADS, default all cores).
//
// A few tokens (decode steps) go through one SGEMV per token instead: SGEMM packs all of W on
// every call, which for one row costs about five times the matrix-vector product itself
// (1 x 576 x 1536: 209 us vs 40 us on the dev machine).
#include <cblas.h>

#include "kernels/cpu/cpu_backend.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr int kMaxGemvTokens = 4;

}  // namespace

void Linear(const LinearParams& p) {
  if (p.num_tokens == 0 || p.out_features == 0) return;
  if (p.num_tokens <= kMaxGemvTokens) {
    for (int t = 0; t < p.num_tokens; ++t) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, p.out_features, p.in_features, 1.0f, p.w,
                  p.in_features, p.x + static_cast<int64_t>(t) * p.in_features, 1, 0.0f,
                  p.y + static_cast<int64_t>(t) * p.out_features, 1);
    }
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p.num_tokens, p.out_features,
                p.in_features, 1.0f, p.x, p.in_features, p.w, p.in_features, 0.0f, p.y,
                p.out_features);
  }
  if (p.bias == nullptr) return;
  for (int t = 0; t < p.num_tokens; ++t) {
    float* y = p.y + static_cast<int64_t>(t) * p.out_features;  // [out_features]
    for (int o = 0; o < p.out_features; ++o) y[o] += p.bias[o];
  }
}

}  // namespace kvserve::kernels::cpu
