// The packed form of quant_linear.h: PackQuantRows, and the reference kernel on it (plain C++, any
// CPU), which computes every (row, token) with the operations of the AVX2 and AVX-512 kernels
// (quant_packed_avx2.cc, quant_packed_avx512.cc) in the same order, so the three agree bit for bit.
#include <cmath>
#include <cstring>

#include "kernels/cpu/quant_linear.h"

namespace kvserve::kernels::cpu {
namespace {

// Bytes of one tile block (16 rows x 32 elements) of the packed form; 0 when not packable.
int TileBlockBytes(DType w_dtype) {
  switch (w_dtype) {
    case DType::kQ8_0:
      return kPackedQ8_0BlockBytes;
    case DType::kQ4_0:
      return kPackedQ4_0BlockBytes;
    case DType::kQ4_1:
      return kPackedQ4_1BlockBytes;
    default:
      return 0;
  }
}

float LoadHalf(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return HalfToFloat(bits);
}

// Row r's block of a packed tile block: its unsigned weights u[32] (element order), scale, offset.
void UnpackTileBlock(const uint8_t* tile_block, DType w_dtype, int r, int32_t* u, float* dw,
                     float* off) {
  if (w_dtype == DType::kQ8_0) {
    for (int i = 0; i < 32; ++i) u[i] = tile_block[(i / 4) * 64 + 4 * r + i % 4];
    *dw = LoadHalf(tile_block + kPackedQ8WeightBytes + 2 * r);
    *off = -128.0f * *dw;
    return;
  }
  for (int j = 0; j < 16; ++j) {
    const uint8_t byte = tile_block[(j / 4) * 64 + 4 * r + j % 4];
    u[j] = byte & 0x0F;
    u[j + 16] = byte >> 4;
  }
  const uint8_t* halves = tile_block + kPackedQ4WeightBytes;  // d [16], then m [16] (Q4_1)
  *dw = LoadHalf(halves + 2 * r);
  *off = w_dtype == DType::kQ4_1 ? LoadHalf(halves + kPackedHalvesBytes + 2 * r) : -8.0f * *dw;
}

template <DType kType>
void PackedScalar(const QuantRowsArgs& a, int32_t row_begin, int32_t row_end) {
  const int64_t tile_bytes = int64_t{a.num_blocks} * TileBlockBytes(kType);
  int32_t u[kActBlock];
  for (int32_t o = row_begin; o < row_end; ++o) {
    const uint8_t* tile = a.w + (o / kPackRows) * tile_bytes;
    for (int32_t t = 0; t < a.num_tokens; ++t) {
      const ActBlock* x = a.x + int64_t{t} * a.num_blocks;
      float acc = 0.0f;
      for (int32_t b = 0; b < a.num_blocks; ++b) {
        float dw, off;
        UnpackTileBlock(tile + b * TileBlockBytes(kType), kType, o % kPackRows, u, &dw, &off);
        int32_t dot = 0;
        for (int i = 0; i < kActBlock; ++i) dot += u[i] * x[b].q[i];
        acc = std::fma(static_cast<float>(dot), dw * x[b].d, acc);
        acc = std::fma(off, x[b].s, acc);
      }
      a.y[int64_t{t} * a.out_features + o] = acc;
    }
  }
}

}  // namespace

bool IsPackableQuantType(DType w_dtype) { return TileBlockBytes(w_dtype) != 0; }

int64_t PackedQuantBytes(DType w_dtype, int64_t rows, int64_t cols) {
  if (!IsPackableQuantType(w_dtype) || cols % kActBlock != 0) return 0;
  const int64_t tiles = (rows + kPackRows - 1) / kPackRows;
  return tiles * (cols / kActBlock) * TileBlockBytes(w_dtype);
}

void PackQuantRows(const uint8_t* w, DType w_dtype, int64_t rows, int64_t cols, uint8_t* out) {
  const int64_t num_blocks = cols / kActBlock;
  const int64_t row_bytes = RowBytes(w_dtype, cols);
  const int block_bytes = GetDTypeInfo(w_dtype).block_bytes;
  const int tile_block_bytes = TileBlockBytes(w_dtype);
  std::memset(out, 0, static_cast<size_t>(PackedQuantBytes(w_dtype, rows, cols)));
  for (int64_t o = 0; o < rows; ++o) {
    const int r = static_cast<int>(o % kPackRows);
    uint8_t* tile = out + (o / kPackRows) * num_blocks * tile_block_bytes;
    for (int64_t b = 0; b < num_blocks; ++b) {
      const uint8_t* block = w + o * row_bytes + b * block_bytes;
      uint8_t* dst = tile + b * tile_block_bytes;
      if (w_dtype == DType::kQ8_0) {  // d, q[32]
        for (int i = 0; i < 32; ++i) {
          dst[(i / 4) * 64 + 4 * r + i % 4] = static_cast<uint8_t>(block[2 + i] ^ 0x80);
        }
        std::memcpy(dst + kPackedQ8WeightBytes + 2 * r, block, 2);
        continue;
      }
      const int nibbles = w_dtype == DType::kQ4_1 ? 4 : 2;  // d[, m], nibble bytes[16]
      for (int j = 0; j < 16; ++j) dst[(j / 4) * 64 + 4 * r + j % 4] = block[nibbles + j];
      uint8_t* halves = dst + kPackedQ4WeightBytes;
      std::memcpy(halves + 2 * r, block, 2);
      if (w_dtype == DType::kQ4_1) std::memcpy(halves + kPackedHalvesBytes + 2 * r, block + 2, 2);
    }
  }
}

QuantPackedFn QuantPackedScalar(DType w_dtype) {
  switch (w_dtype) {
    case DType::kQ8_0:
      return &PackedScalar<DType::kQ8_0>;
    case DType::kQ4_0:
      return &PackedScalar<DType::kQ4_0>;
    case DType::kQ4_1:
      return &PackedScalar<DType::kQ4_1>;
    default:
      return nullptr;
  }
}

}  // namespace kvserve::kernels::cpu
