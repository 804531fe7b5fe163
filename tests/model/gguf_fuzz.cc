// libFuzzer target: arbitrary bytes through GgufFile::Parse and, when they parse, through
// ConfigFromGguf and WeightsFromGguf (capped at 4M floats so a valid-looking model cannot
// exhaust memory). Every outcome must be a Status, never a crash, leak or UB.
//   build-fuzz-io/tests/model/gguf_fuzz -max_total_time=300 corpus/ seeds/
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "model/gguf_file.h"
#include "model/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<std::unique_ptr<kvserve::GgufFile>> file =
      kvserve::GgufFile::Parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!file.ok()) return 0;
  // Touch every tensor's bytes so that an out-of-bounds data pointer shows up under ASan.
  uint32_t checksum = 0;
  for (const kvserve::GgufTensorInfo& t : (*file)->tensors()) {
    if (t.num_bytes > 0) checksum += t.data[0] + t.data[t.num_bytes - 1];
  }
  for (const std::string& key : (*file)->keys()) {
    (void)(*file)->GetStringArray(key);
    (void)(*file)->GetIntArray(key);
    (void)(*file)->GetFloatArray(key);
  }
  absl::StatusOr<kvserve::ModelConfig> config = kvserve::ConfigFromGguf(**file);
  if (!config.ok()) return static_cast<int>(checksum & 0);
  kvserve::GgufLoadOptions options;
  options.num_threads = 1;
  options.max_total_floats = int64_t{1} << 22;
  (void)kvserve::WeightsFromGguf(**file, options);
  return 0;
}
