#include "kernels/backend_factory.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace kvserve::kernels {

bool IsCudaDevice(std::string_view device) {
  return device == "cuda" || device.substr(0, 5) == "cuda:";
}

std::unique_ptr<Backend> CreateBackend(std::string_view device, int num_threads,
                                       std::string* error) {
  if (device == "cpu") {
    const char* pack = std::getenv("KVSERVE_CPU_PACK");  // "0": GGUF rows read as stored
    return std::make_unique<cpu::CpuBackend>(num_threads,
                                             pack == nullptr || std::string_view(pack) != "0");
  }
  if (!IsCudaDevice(device)) {
    *error = "unknown device \"" + std::string(device) + "\": want cpu, cuda or cuda:N";
    return nullptr;
  }
  int index = 0;
  if (device.size() > 5) {
    const std::string digits(device.substr(5));
    char* end = nullptr;
    const long value = std::strtol(digits.c_str(), &end, 10);
    if (digits.empty() || *end != '\0' || value < 0 || value > 1024) {
      *error = "bad CUDA device index in \"" + std::string(device) + "\"";
      return nullptr;
    }
    index = static_cast<int>(value);
  }
  void* module = OpenCudaModule(error);
  if (module == nullptr) return nullptr;
  using Factory = Backend* (*)(int, char*, size_t);
  auto factory = reinterpret_cast<Factory>(dlsym(module, "KvserveCreateCudaBackend"));
  if (factory == nullptr) {
    *error = "libkvserve_cuda.so has no KvserveCreateCudaBackend";
    return nullptr;
  }
  char message[512] = {0};
  Backend* backend = factory(index, message, sizeof(message));
  if (backend == nullptr) *error = message;
  return std::unique_ptr<Backend>(backend);
}

void* OpenCudaModule(std::string* error) {
  // The module stays loaded for the life of the process (the backend's code lives in it);
  // dlopen counts references, so a second call returns the same handle.
  // The module: $KVSERVE_CUDA_MODULE, then beside the executable, then the build tree's copy,
  // then the loader's search path.
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("KVSERVE_CUDA_MODULE"); path != nullptr && *path != '\0') {
    candidates.push_back(path);
  }
  if (char exe[4096]; readlink("/proc/self/exe", exe, sizeof(exe) - 1) > 0) {
    exe[sizeof(exe) - 1] = '\0';
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/') + 1);
    candidates.push_back(dir + "libkvserve_cuda.so");
    candidates.push_back(dir + "../lib/libkvserve_cuda.so");
  }
#if defined(KVSERVE_CUDA_MODULE)
  candidates.push_back(KVSERVE_CUDA_MODULE);
#endif
  candidates.push_back("libkvserve_cuda.so");
  std::string dl_error = "not found";
  for (const std::string& candidate : candidates) {
    void* module = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (module != nullptr) return module;
    if (const char* message = dlerror(); message != nullptr) dl_error = message;
  }
  *error = "the CUDA backend module libkvserve_cuda.so cannot be loaded (" + dl_error +
           "; a build without CUDA, or the CUDA libraries are missing)";
  return nullptr;
}

}  // namespace kvserve::kernels
