// The panel form of dense_panels.h: its size and the packing (plain C++, once at load).
#include "kernels/cpu/dense_panels.h"

#include <cstring>

namespace kvserve::kernels::cpu {

bool HasDensePanels(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

int64_t DensePanelBytes(DType dtype, int64_t rows, int64_t cols) {
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  if (dtype == DType::kF32) return panels * cols * kPanelRows * 4;
  if (dtype == DType::kBF16) return panels * (cols + 1) / 2 * 2 * kPanelRows * 2;
  return 0;
}

void PackDensePanels(const void* w, DType dtype, int64_t rows, int64_t cols, void* out) {
  std::memset(out, 0, static_cast<size_t>(DensePanelBytes(dtype, rows, cols)));
  if (dtype == DType::kF32) {
    const auto* src = static_cast<const float*>(w);  // [rows, cols]
    auto* dst = static_cast<float*>(out);            // [panels][cols][8]
    for (int64_t r = 0; r < rows; ++r) {
      float* panel = dst + r / kPanelRows * cols * kPanelRows;  // [cols][8]
      for (int64_t k = 0; k < cols; ++k) panel[k * kPanelRows + r % kPanelRows] = src[r * cols + k];
    }
    return;
  }
  const auto* src = static_cast<const uint16_t*>(w);  // [rows, cols]
  auto* dst = static_cast<uint16_t*>(out);            // [panels][cols_pad / 2][8][2]
  const int64_t cols_pad = (cols + 1) / 2 * 2;
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* panel = dst + r / kPanelRows * cols_pad * kPanelRows;
    for (int64_t k = 0; k < cols; ++k) {
      panel[(k / 2 * kPanelRows + r % kPanelRows) * 2 + k % 2] = src[r * cols + k];
    }
  }
}

void DensePanelsRow(const void* panels, DType dtype, int64_t cols, int64_t row, float* out) {
  const int64_t j = row % kPanelRows;
  if (dtype == DType::kF32) {
    const float* panel = static_cast<const float*>(panels) + row / kPanelRows * cols * kPanelRows;
    for (int64_t k = 0; k < cols; ++k) out[k] = panel[k * kPanelRows + j];
    return;
  }
  const int64_t cols_pad = (cols + 1) / 2 * 2;
  const uint16_t* panel =
      static_cast<const uint16_t*>(panels) + row / kPanelRows * cols_pad * kPanelRows;
  for (int64_t k = 0; k < cols; ++k) {
    out[k] = BFloat16ToFloat(panel[(k / 2 * kPanelRows + j) * 2 + k % 2]);
  }
}

}  // namespace kvserve::kernels::cpu
