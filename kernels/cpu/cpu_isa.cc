#include "kernels/cpu/cpu_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvserve::kernels::cpu {
namespace {

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

CpuIsa Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512vnni");
  if (avx512) return CpuIsa::kAvx512;
  if (avx2) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kScalar;
}

// The cap KVSERVE_CPU_ISA sets; kAvx512 (no cap) when it is unset or unknown.
CpuIsa EnvironmentCap() {
  const char* value = std::getenv("KVSERVE_CPU_ISA");
  if (value == nullptr || *value == '\0') return CpuIsa::kAvx512;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (std::strcmp(value, CpuIsaName(isa)) == 0) return isa;
  }
  std::fprintf(stderr, "KVSERVE_CPU_ISA=%s is not one of scalar, avx2, avx512; ignored\n", value);
  return CpuIsa::kAvx512;
}

std::atomic<int> test_cap{static_cast<int>(CpuIsa::kAvx512)};

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

CpuIsa DetectedCpuIsa() {
  static const CpuIsa detected = Detect();
  return detected;
}

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

CpuIsa ActiveCpuIsa() {
  static const int hardware_and_environment =
      std::min(static_cast<int>(DetectedCpuIsa()), static_cast<int>(EnvironmentCap()));
  return static_cast<CpuIsa>(
      std::min(hardware_and_environment, test_cap.load(std::memory_order_relaxed)));
}

void SetCpuIsaCapForTesting(CpuIsa cap) {
  test_cap.store(static_cast<int>(cap), std::memory_order_relaxed);
}

}  // namespace kvserve::kernels::cpu
