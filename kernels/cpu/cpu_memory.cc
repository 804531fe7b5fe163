// CpuBackend's memory: host allocations, memcpy, and the memory the container may use.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "kernels/cpu/cpu_backend.h"

namespace kvserve::kernels::cpu {
namespace {

constexpr size_t kAlignment = 64;

// The first number of `key` in /proc/meminfo (kB), in bytes; -1 when absent.
int64_t MemInfoBytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kb = 0;
  std::string unit;
  while (in >> name >> kb) {
    std::getline(in, unit);
    if (name == key + ":") return kb * 1024;
  }
  return -1;
}

// cgroup v2 memory.max and memory.current; -1 when unlimited or not in a cgroup.
int64_t ReadCgroupValue(const char* path) {
  std::ifstream in(path);
  std::string value;
  if (!(in >> value) || value == "max") return -1;
  return std::strtoll(value.c_str(), nullptr, 10);
}

}  // namespace

void* CpuBackend::Allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  return std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
}

void CpuBackend::Free(void* ptr) { std::free(ptr); }

void CpuBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void CpuBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void CpuBackend::CopyFromHostBeside(const CopyRegion* regions, int count) {
  if (count <= 0) return;
  copies_.Post([batch = std::vector<CopyRegion>(regions, regions + count)] {
    for (const CopyRegion& region : batch) std::memcpy(region.dst, region.src, region.bytes);
  });
}

void CpuBackend::CopyOnDevice(void* dst, const void* src, size_t bytes) {
  std::memmove(dst, src, bytes);
}

void CpuBackend::Memset(void* dst, int value, size_t bytes) { std::memset(dst, value, bytes); }

MemoryInfo CpuBackend::GetMemoryInfo() const {
  MemoryInfo info;
  info.total_bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  info.free_bytes = MemInfoBytes("MemAvailable");
  if (info.free_bytes < 0) info.free_bytes = info.total_bytes;
  const int64_t limit = ReadCgroupValue("/sys/fs/cgroup/memory.max");
  if (limit > 0 && limit < info.total_bytes) {
    info.total_bytes = limit;
    const int64_t used = ReadCgroupValue("/sys/fs/cgroup/memory.current");
    if (used >= 0) info.free_bytes = std::min(info.free_bytes, std::max<int64_t>(0, limit - used));
  }
  return info;
}

}  // namespace kvserve::kernels::cpu
