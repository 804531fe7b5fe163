#include "model/device_buffer.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(kernels::Backend* backend, size_t bytes,
                                                    std::string_view what) {
  DeviceBuffer buffer;
  buffer.backend_ = backend;  // first: no path has data_ without the backend that frees it
  buffer.data_ = backend->Allocate(bytes);
  if (buffer.data_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("out of ", backend->name(), " memory for ",
                                                     std::string(what), " (", bytes, " bytes)"));
  }
  buffer.bytes_ = bytes;
  return buffer;
}

}  // namespace kvserve
