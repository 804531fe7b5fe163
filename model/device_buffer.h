// DeviceBuffer: one allocation in a kernels::Backend's memory (host memory for the CPU backend,
// device memory for CUDA), freed with the backend when the buffer dies. Move-only.
//
// Everything the forward pass hands a kernel (weights, activations, step metadata, the KV pool)
// lives in such buffers, so the same model code runs on every backend.
// Thread-safety: a plain owner; the backend's rules apply to the memory.
#ifndef KVSERVE_MODEL_DEVICE_BUFFER_H_
#define KVSERVE_MODEL_DEVICE_BUFFER_H_

#include <cstddef>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/kernels.h"

namespace kvserve {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // RESOURCE_EXHAUSTED naming `what` and the size when the backend has not the memory.
  // REQUIRES: backend outlives the buffer.
  static absl::StatusOr<DeviceBuffer> Allocate(kernels::Backend* backend, size_t bytes,
                                               std::string_view what);
  ~DeviceBuffer() { Reset(); }

  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      backend_ = std::exchange(other.backend_, nullptr);
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Reset() {
    if (data_ != nullptr) backend_->Free(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  kernels::Backend* backend_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_DEVICE_BUFFER_H_
