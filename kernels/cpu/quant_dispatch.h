// The parts every kernel file of quant_linear.h writes the same way around its own per-row code:
// the choice of kernel by weight type (QuantDecoders::KernelFor) and the row loop of the
// row-at-a-time SIMD kernels, whose token tail goes to a kernel for its exact count
// (RowsInTokenGroups). Each file instantiates them with its own decoders and kernels.
//
// Included by the files compiled with -mavx2 / -mavx512*: everything here is a template in an
// anonymous namespace, so each file compiles its own copy and no other file can end up calling
// one (an inline function with external linkage compiled there could be the copy the linker keeps
// for the whole program, and fault on an older CPU); nor does anything here call a function of
// another header (<type_traits> is used for a constant only). Thread-safety: pure functions.
#ifndef KVSERVE_KERNELS_CPU_QUANT_DISPATCH_H_
#define KVSERVE_KERNELS_CPU_QUANT_DISPATCH_H_

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/quant_linear.h"
#include "kernels/dtype.h"

namespace kvserve::kernels::cpu {
namespace {

// Names a decoder type as a value, for the kernel makers of QuantDecoders::KernelFor.
template <typename Decoder>
struct DecoderTag {};

// The decoders of one kernel file by the weight type they read; void for a type the file has no
// kernel for.
template <typename Q8_0, typename Q4_0, typename Q4_1, typename Q4_K = void, typename Q5_K = void,
          typename Q6_K = void>
struct QuantDecoders {
  // make(DecoderTag<D>{}) for the decoder D of w_dtype: the file's kernel (of type Fn, a function
  // pointer) for that type; nullptr where the file has none or w_dtype is not block quantized.
  template <typename Fn, typename Make>
  static Fn KernelFor(DType w_dtype, Make make) {
    switch (w_dtype) {
      case DType::kQ8_0:
        return MakeFor<Fn, Q8_0>(make);
      case DType::kQ4_0:
        return MakeFor<Fn, Q4_0>(make);
      case DType::kQ4_1:
        return MakeFor<Fn, Q4_1>(make);
      case DType::kQ4_K:
        return MakeFor<Fn, Q4_K>(make);
      case DType::kQ5_K:
        return MakeFor<Fn, Q5_K>(make);
      case DType::kQ6_K:
        return MakeFor<Fn, Q6_K>(make);
      default:
        return nullptr;
    }
  }

 private:
  template <typename Fn, typename Decoder, typename Make>
  static Fn MakeFor(Make make) {
    if constexpr (std::is_void_v<Decoder>) {
      return nullptr;
    } else {
      return make(DecoderTag<Decoder>{});
    }
  }
};

// Names a token count as a value, for the row kernels of RowsInTokenGroups.
template <int kTokens>
struct TokenCount {};

// Output rows [row_begin, row_end) of a QuantRowsFn for every token: per row, one call
// row_tokens(TokenCount<kTokenGroup>{}, row, t0, o) for each whole group of kTokenGroup tokens
// from t0, then one with the count of those left (1 to kTokenGroup - 1), so that each count has a
// kernel of its own with its accumulators in registers. row: weight row o, [row_bytes].
template <int kTokenGroup, typename RowTokens>
void RowsInTokenGroups(const QuantRowsArgs& a, int32_t row_begin, int32_t row_end,
                       RowTokens row_tokens) {
  static_assert(kTokenGroup == 4, "the tail below covers 1 to 3 tokens");
  for (int32_t o = row_begin; o < row_end; ++o) {
    const uint8_t* row = a.w + o * a.row_bytes;  // [row_bytes]
    int32_t t0 = 0;
    for (; t0 + kTokenGroup <= a.num_tokens; t0 += kTokenGroup) {
      row_tokens(TokenCount<kTokenGroup>{}, row, t0, o);
    }
    switch (a.num_tokens - t0) {
      case 3:
        row_tokens(TokenCount<3>{}, row, t0, o);
        break;
      case 2:
        row_tokens(TokenCount<2>{}, row, t0, o);
        break;
      case 1:
        row_tokens(TokenCount<1>{}, row, t0, o);
        break;
      default:
        break;
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_QUANT_DISPATCH_H_
