// SafetensorsFile: a read-only view of one .safetensors file (Hugging Face): an 8-byte
// little-endian header length, a JSON header {"name": {"dtype", "shape", "data_offsets"}, ...,
// "__metadata__": {...}}, then the data section. Tensors point into the mapped file. Nothing is
// trusted: header length, JSON, dtypes, shapes (overflow-checked) and offsets are all checked,
// and a bad file yields an absl::Status naming the file and the tensor.
//
// Thread-safety: immutable after construction; safe to read from any thread.
#ifndef KVSERVE_MODEL_SAFETENSORS_FILE_H_
#define KVSERVE_MODEL_SAFETENSORS_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/gguf_file.h"
#include "model/mapped_file.h"

namespace kvserve {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as written: "F32", "F16", "BF16", "I64", ...
  GgmlType type;               // the decodable encoding (F32, F16, BF16 only)
  std::vector<int64_t> shape;  // row-major: shape.back() is the contiguous dimension
  int64_t num_elements;
  const uint8_t* data;  // [num_bytes] into the file; valid while the SafetensorsFile lives
  uint64_t num_bytes;
};

class SafetensorsFile {
 public:
  // Largest JSON header accepted (the format's own readers cap it at 100 MB).
  static constexpr uint64_t kMaxHeaderBytes = 100u << 20;

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses bytes the caller keeps alive for the life of the result; `name` labels errors.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Parse(std::string_view bytes,
                                                                std::string_view name);

  const SafetensorsTensor* FindTensor(std::string_view name) const;  // nullptr if absent
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // String values of "__metadata__" (e.g. {"format": "pt"}).
  const absl::flat_hash_map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  absl::Status ParseBytes(std::string_view bytes);

  std::unique_ptr<MappedFile> mapping_;  // owns the bytes for Open(); null for Parse()
  std::vector<SafetensorsTensor> tensors_;
  absl::flat_hash_map<std::string, size_t> index_;  // name -> index into tensors_
  absl::flat_hash_map<std::string, std::string> metadata_;
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_SAFETENSORS_FILE_H_
