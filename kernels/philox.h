// Philox4x32-10, the counter-based random number generator of Salmon et al., "Parallel Random
// Numbers: As Easy as 1, 2, 3" (SC 2011): a keyed bijection of a 128-bit counter, so the n-th
// random number of a stream is computed directly from (key, n) with no state to carry.
//
// kvserve keys it by the request's seed and counts by the token's index in the sequence, so a
// sampled token depends only on (logits, params, seed, index): not on the batch it ran in, the
// order of calls, or the worker that resumed the sequence. Pure functions; thread-safe.
#ifndef KVSERVE_KERNELS_PHILOX_H_
#define KVSERVE_KERNELS_PHILOX_H_

#include <array>
#include <cstdint>

namespace kvserve::kernels {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox4x32 on counter under key.
PhiloxCounter Philox4x32(PhiloxCounter counter, PhiloxKey key);

// A uniform double in [0, 1) with 53 random bits, the first draw of the stream (seed, index).
double UniformFromCounter(uint64_t seed, uint64_t index);

}  // namespace kvserve::kernels

#endif  // KVSERVE_KERNELS_PHILOX_H_
