// GgufFile: a read-only view of a GGUF file (versions 2 and 3): its metadata key/value pairs and
// its tensor table, with tensor data pointing into the file's bytes (an mmap for Open(), the
// caller's buffer for Parse()). Nothing in the file is trusted: every count, length, dimension
// and offset is bounds-checked while parsing, and a malformed file yields an absl::Status that
// names the problem (and the key or tensor). Allocation is bounded by the file size, never by a
// count read from the header.
//
// Thread-safety: immutable after construction; any number of threads may read it concurrently.
// Tensor data pointers stay valid while the GgufFile lives.
#ifndef KVSERVE_MODEL_GGUF_FILE_H_
#define KVSERVE_MODEL_GGUF_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"

namespace kvserve {

class MappedFile;

// Tensor element encodings (values as in the GGUF specification).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// "F32", "Q4_1", ...; "type(<n>)" for a value outside the enum.
std::string GgmlTypeName(GgmlType type);

// The storage type the kernels know `type` as; nullopt when the type is not supported.
std::optional<kernels::DType> GgmlToDType(GgmlType type);

// Elements per block and bytes per block of `type`; false when the type is not supported.
bool GgmlTypeBlock(GgmlType type, int64_t* block_elements, int64_t* block_bytes);

struct GgufTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (fastest) dimension
  uint64_t offset;            // from the start of the data section
  uint64_t num_bytes;
  const uint8_t* data;  // [num_bytes] into the mapping; valid while the GgufFile lives

  // Product of dims (fits in int64, checked while parsing).
  int64_t num_elements() const;
};

// The value types of GGUF metadata (values as in the specification).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", "array[string]", ...
std::string GgufValueTypeName(GgufValueType type);
// True for the eight integer types (not bool).
bool IsIntegerType(GgufValueType type);

// One metadata value. Scalars are widened (integers to int64 / uint64, floats to double). Strings
// and arrays of scalars or strings point into the file's bytes, so a big array costs no more memory
// than its entries need; nested arrays hold their elements in `array`.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  int64_t int_value = 0;          // every integer type and bool
  uint64_t uint_value = 0;        // every integer type, unsigned view
  double float_value = 0.0;       // float32 / float64
  std::string_view string_value;  // kString, into the file
  // Arrays only:
  GgufValueType element_type = GgufValueType::kUint8;
  uint64_t array_length = 0;
  const uint8_t* scalar_elements = nullptr;  // [array_length] packed little-endian scalars
  std::vector<std::string_view> strings;     // [array_length] when element_type is kString
  std::vector<GgufValue> array;              // [array_length] when element_type is kArray
};

class GgufFile {
 public:
  // Maps the file at `path` read-only and parses it. NOT_FOUND when the file cannot be opened.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes the caller keeps alive (and unchanged) for the life of the result.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(std::string_view bytes);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  // Metadata lookups. A missing key is NOT_FOUND naming the key; a value of another type is
  // INVALID_ARGUMENT naming the key, the stored type and the requested type.
  bool Has(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;   // any integer type
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // f32/f64
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;  // f32/f64
  // Number of elements of an array value, without copying it.
  absl::StatusOr<int64_t> GetArrayLength(std::string_view key) const;
  // The raw value, or nullptr when absent.
  const GgufValue* FindValue(std::string_view key) const;
  // Keys in file order.
  const std::vector<std::string>& keys() const { return keys_; }

  const GgufTensorInfo* FindTensor(std::string_view name) const;  // nullptr if absent
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // Gives back to the kernel the mapped pages wholly inside [data, data + bytes) (a tensor this
  // process only needed while copying part of it): they leave its resident memory and are read
  // from the file again if touched. Contents are unchanged. A no-op for Parse()d bytes.
  void DropPages(const uint8_t* data, uint64_t bytes) const;

 private:
  GgufFile() = default;
  class Parser;

  absl::StatusOr<const GgufValue*> Lookup(std::string_view key) const;

  std::unique_ptr<MappedFile> mapping_;  // owns the bytes for Open(); null for Parse()
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::string> keys_;
  absl::flat_hash_map<std::string, GgufValue> values_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;  // name -> index into tensors_
};

}  // namespace kvserve

#endif  // KVSERVE_MODEL_GGUF_FILE_H_
