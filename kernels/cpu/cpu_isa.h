// Which SIMD instruction set the CPU kernels use, chosen at run time. The library is built for
// baseline x86-64 (no -march=native); the typed Linear kernels (quant_linear.h, half_linear.h)
// come in a scalar version and versions compiled for AVX2 and AVX-512, and pick one per call
// from ActiveCpuIsa().
//
// ActiveCpuIsa() is the lowest of: what the CPU supports, the cap in the environment variable
// KVSERVE_CPU_ISA (scalar | avx2 | avx512; read once; unknown values are ignored with a message
// on stderr), and the cap a test set with SetCpuIsaCapForTesting().
// Thread-safety: every function may be called from any thread.
#ifndef KVSERVE_KERNELS_CPU_CPU_ISA_H_
#define KVSERVE_KERNELS_CPU_CPU_ISA_H_

namespace kvserve::kernels::cpu {

// Ordered: each level implies the ones below it.
enum class CpuIsa : int {
  kScalar = 0,
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512 F/BW/VL + VNNI (bf16 dot products also use AVX512-BF16 when present)
};

const char* CpuIsaName(CpuIsa isa);

// The best level this CPU supports (cached after the first call).
CpuIsa DetectedCpuIsa();
// Whether this CPU has AVX512-BF16 (vdpbf16ps).
bool CpuHasAvx512Bf16();

// The level the kernels use now. See the file comment.
CpuIsa ActiveCpuIsa();

// Caps ActiveCpuIsa() at `cap` (kAvx512: no cap beyond the hardware and the environment), so one
// test binary can run every path the machine has. Not meant for production code.
void SetCpuIsaCapForTesting(CpuIsa cap);

}  // namespace kvserve::kernels::cpu

#endif  // KVSERVE_KERNELS_CPU_CPU_ISA_H_
