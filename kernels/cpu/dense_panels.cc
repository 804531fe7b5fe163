// The panel form of dense_panels.h: its size and the packing (plain C++, once at load).
#include "kernels/cpu/dense_panels.h"

#include <cstring>

namespace kvserve::kernels::cpu {

bool HasDensePanels(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

int64_t DensePanelElems(DType dtype, int64_t cols) {
  return (dtype == DType::kBF16 ? (cols + 1) / 2 * 2 : cols) * kPanelRows;
}

int64_t DensePanelBytes(DType dtype, int64_t rows, int64_t cols) {
  if (!HasDensePanels(dtype)) return 0;
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  return panels * DensePanelElems(dtype, cols) * (dtype == DType::kF32 ? 4 : 2);
}

namespace {

// Where w(row, k) lies in the panel form, in elements: f32 [panel][k][j], bf16 [panel][k / 2][j]
// [k % 2] (j = row % 8).
int64_t PanelIndex(DType dtype, int64_t cols, int64_t row, int64_t k) {
  const int64_t panel = row / kPanelRows * DensePanelElems(dtype, cols);
  const int64_t j = row % kPanelRows;
  if (dtype == DType::kF32) return panel + k * kPanelRows + j;
  return panel + (k / 2 * kPanelRows + j) * 2 + k % 2;
}

}  // namespace

void PackDensePanels(const void* w, DType dtype, int64_t rows, int64_t cols, void* out) {
  std::memset(out, 0, static_cast<size_t>(DensePanelBytes(dtype, rows, cols)));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const int64_t at = PanelIndex(dtype, cols, r, k);
      if (dtype == DType::kF32) {
        static_cast<float*>(out)[at] = static_cast<const float*>(w)[r * cols + k];
      } else {
        static_cast<uint16_t*>(out)[at] = static_cast<const uint16_t*>(w)[r * cols + k];
      }
    }
  }
}

void DensePanelsRow(const void* panels, DType dtype, int64_t cols, int64_t row, float* out) {
  for (int64_t k = 0; k < cols; ++k) {
    const int64_t at = PanelIndex(dtype, cols, row, k);
    out[k] = dtype == DType::kF32 ? static_cast<const float*>(panels)[at]
                                  : BFloat16ToFloat(static_cast<const uint16_t*>(panels)[at]);
  }
}

}  // namespace kvserve::kernels::cpu
