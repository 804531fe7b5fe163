#include <cmath>

#include "kernels/kernels.h"

namespace kvserve::kernels {

void ComputeRopeInvFreq(const RopeConfig& config, float* inv_freq /* [head_dim / 2] */) {
  const int half = config.head_dim / 2;
  constexpr double kTwoPi = 6.283185307179586;
  const double old_len = config.original_max_position;
  const double low_freq_wavelen = old_len / config.low_freq_factor;
  const double high_freq_wavelen = old_len / config.high_freq_factor;
  for (int i = 0; i < half; ++i) {
    double freq = std::pow(static_cast<double>(config.theta), -2.0 * i / config.head_dim);
    switch (config.scaling) {
      case RopeScalingType::kNone:
        break;
      case RopeScalingType::kLinear:
        freq /= config.factor;
        break;
      case RopeScalingType::kLlama3: {
        const double wavelen = kTwoPi / freq;
        if (wavelen > low_freq_wavelen) {
          freq /= config.factor;
        } else if (wavelen >= high_freq_wavelen) {
          // Between the two bands: blend the scaled and the original frequency.
          const double smooth = (old_len / wavelen - config.low_freq_factor) /
                                (config.high_freq_factor - config.low_freq_factor);
          freq = (1.0 - smooth) * freq / config.factor + smooth * freq;
        }
        break;
      }
    }
    inv_freq[i] = static_cast<float>(freq);
  }
}

}  // namespace kvserve::kernels
