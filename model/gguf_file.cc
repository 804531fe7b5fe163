#include "model/gguf_file.h"

#include <bit>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/mapped_file.h"

namespace kvserve {
namespace {

// absl here is built with its own string_view type; std::string_view converts explicitly.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

static_assert(std::endian::native == std::endian::little, "GGUF is read as little-endian");

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kMaxDims = 4;             // ggml tensors have at most 4 dimensions
constexpr int kMaxArrayDepth = 8;            // nested metadata arrays deeper than this are refused

// Bytes one scalar of `type` takes in the file; 0 for string / array (variable size).
uint64_t ScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownValueType(uint32_t type) {
  return type <= static_cast<uint32_t>(GgufValueType::kFloat64);
}

// Decodes the scalar of `type` at `p` (ScalarSize(type) readable bytes) into `value`.
void DecodeScalar(GgufValueType type, const uint8_t* p, GgufValue* value) {
  value->type = type;
  auto load = [p](auto tag) {
    decltype(tag) v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (type) {
    case GgufValueType::kUint8:
      value->uint_value = load(uint8_t{});
      value->int_value = static_cast<int64_t>(value->uint_value);
      break;
    case GgufValueType::kInt8:
      value->int_value = load(int8_t{});
      value->uint_value = static_cast<uint64_t>(value->int_value);
      break;
    case GgufValueType::kBool:
      value->int_value = load(uint8_t{}) != 0 ? 1 : 0;
      value->uint_value = static_cast<uint64_t>(value->int_value);
      break;
    case GgufValueType::kUint16:
      value->uint_value = load(uint16_t{});
      value->int_value = static_cast<int64_t>(value->uint_value);
      break;
    case GgufValueType::kInt16:
      value->int_value = load(int16_t{});
      value->uint_value = static_cast<uint64_t>(value->int_value);
      break;
    case GgufValueType::kUint32:
      value->uint_value = load(uint32_t{});
      value->int_value = static_cast<int64_t>(value->uint_value);
      break;
    case GgufValueType::kInt32:
      value->int_value = load(int32_t{});
      value->uint_value = static_cast<uint64_t>(value->int_value);
      break;
    case GgufValueType::kUint64:
      value->uint_value = load(uint64_t{});
      value->int_value = static_cast<int64_t>(value->uint_value);
      break;
    case GgufValueType::kInt64:
      value->int_value = load(int64_t{});
      value->uint_value = static_cast<uint64_t>(value->int_value);
      break;
    case GgufValueType::kFloat32:
      value->float_value = load(float{});
      break;
    case GgufValueType::kFloat64:
      value->float_value = load(double{});
      break;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      break;
  }
}

std::string TypeOf(const GgufValue& value) {
  if (value.type == GgufValueType::kArray) {
    return absl::StrCat("array[", GgufValueTypeName(value.element_type), "]");
  }
  return GgufValueTypeName(value.type);
}

}  // namespace

std::string GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ4_1:
      return "Q4_1";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ4_K:
      return "Q4_K";
    case GgmlType::kQ5_K:
      return "Q5_K";
    case GgmlType::kQ6_K:
      return "Q6_K";
    case GgmlType::kBF16:
      return "BF16";
  }
  return absl::StrCat("type(", static_cast<uint32_t>(type), ")");
}

std::optional<kernels::DType> GgmlToDType(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return kernels::DType::kF32;
    case GgmlType::kF16:
      return kernels::DType::kF16;
    case GgmlType::kBF16:
      return kernels::DType::kBF16;
    case GgmlType::kQ4_0:
      return kernels::DType::kQ4_0;
    case GgmlType::kQ4_1:
      return kernels::DType::kQ4_1;
    case GgmlType::kQ8_0:
      return kernels::DType::kQ8_0;
    case GgmlType::kQ4_K:
      return kernels::DType::kQ4_K;
    case GgmlType::kQ5_K:
      return kernels::DType::kQ5_K;
    case GgmlType::kQ6_K:
      return kernels::DType::kQ6_K;
  }
  return std::nullopt;
}

bool GgmlTypeBlock(GgmlType type, int64_t* block_elements, int64_t* block_bytes) {
  const std::optional<kernels::DType> dtype = GgmlToDType(type);
  if (!dtype) return false;
  *block_elements = kernels::GetDTypeInfo(*dtype).block_elements;
  *block_bytes = kernels::GetDTypeInfo(*dtype).block_bytes;
  return true;
}

std::string GgufValueTypeName(GgufValueType type) {
  static constexpr const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};
  const auto index = static_cast<uint32_t>(type);
  if (index < std::size(kNames)) return kNames[index];
  return absl::StrCat("value_type(", index, ")");
}

bool IsIntegerType(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Reads the file front to back; every read checks the bytes left first.
class GgufFile::Parser {
 public:
  Parser(std::string_view bytes, GgufFile* file)
      : data_(reinterpret_cast<const uint8_t*>(bytes.data())), size_(bytes.size()), file_(file) {}

  absl::Status Run() {
    uint32_t magic = 0;
    if (!ReadRaw(&magic, 4)) return Truncated("magic");
    if (magic != kGgufMagic) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a GGUF file: magic 0x", absl::Hex(magic), ", want 0x46554747 (GGUF)"));
    }
    if (!ReadRaw(&file_->version_, 4)) return Truncated("version");
    if (file_->version_ != 2 && file_->version_ != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported GGUF version ", file_->version_, " (supported: 2, 3)"));
    }
    uint64_t tensor_count = 0, kv_count = 0;
    if (!ReadRaw(&tensor_count, 8)) return Truncated("tensor count");
    if (!ReadRaw(&kv_count, 8)) return Truncated("metadata count");
    // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor entry at
    // least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
    if (kv_count > Remaining() / 13) {
      return absl::InvalidArgumentError(absl::StrCat(
          "metadata count ", kv_count, " is more than the ", size_, "-byte file can hold"));
    }
    if (tensor_count > Remaining() / 24) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor count ", tensor_count, " is more than the ", size_, "-byte file can hold"));
    }
    for (uint64_t i = 0; i < kv_count; ++i) {
      KVSERVE_RETURN_IF_ERROR(ReadKeyValue(i));
    }
    KVSERVE_RETURN_IF_ERROR(ReadAlignment());
    file_->tensors_.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) {
      KVSERVE_RETURN_IF_ERROR(ReadTensorInfo(i));
    }
    return PlaceTensorData();
  }

 private:
  uint64_t Remaining() const { return size_ - pos_; }

  bool ReadRaw(void* out, uint64_t n) {
    if (n > Remaining()) return false;
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return true;
  }

  absl::Status Truncated(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF truncated: file ends (", size_, " bytes) while reading ", Sv(what)));
  }

  absl::Status ReadString(std::string_view what, std::string_view* out) {
    uint64_t length = 0;
    if (!ReadRaw(&length, 8)) return Truncated(what);
    if (length > Remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF ", Sv(what), ": string length ", length,
                                                     " exceeds the ", Remaining(),
                                                     " bytes left in the file"));
    }
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    return absl::OkStatus();
  }

  absl::Status ReadKeyValue(uint64_t index) {
    std::string_view key;
    KVSERVE_RETURN_IF_ERROR(ReadString(absl::StrCat("metadata key #", index), &key));
    uint32_t type = 0;
    if (!ReadRaw(&type, 4)) return Truncated(absl::StrCat("type of metadata key '", Sv(key), "'"));
    GgufValue value;
    KVSERVE_RETURN_IF_ERROR(ReadValue(key, type, /*depth=*/0, &value));
    std::string key_string(key);
    if (!file_->values_.emplace(key_string, std::move(value)).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate metadata key '", Sv(key), "'"));
    }
    file_->keys_.push_back(std::move(key_string));
    return absl::OkStatus();
  }

  absl::Status ReadValue(std::string_view key, uint32_t raw_type, int depth, GgufValue* value) {
    if (!IsKnownValueType(raw_type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", Sv(key), "': unknown value type ", raw_type));
    }
    const auto type = static_cast<GgufValueType>(raw_type);
    value->type = type;
    if (type == GgufValueType::kString) {
      return ReadString(absl::StrCat("metadata key '", Sv(key), "'"), &value->string_value);
    }
    if (type != GgufValueType::kArray) {
      const uint64_t n = ScalarSize(type);
      if (n > Remaining()) return Truncated(absl::StrCat("metadata key '", Sv(key), "'"));
      DecodeScalar(type, data_ + pos_, value);
      pos_ += n;
      return absl::OkStatus();
    }
    if (depth >= kMaxArrayDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", Sv(key), "': arrays nested deeper than ", kMaxArrayDepth));
    }
    uint32_t element_type = 0;
    uint64_t length = 0;
    if (!ReadRaw(&element_type, 4) || !ReadRaw(&length, 8)) {
      return Truncated(absl::StrCat("array header of metadata key '", Sv(key), "'"));
    }
    if (!IsKnownValueType(element_type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("metadata key '", Sv(key), "': unknown array element type ", element_type));
    }
    value->element_type = static_cast<GgufValueType>(element_type);
    value->array_length = length;
    // Smallest file footprint of one element: its size, 8 for a string, 12 for an array.
    const uint64_t scalar = ScalarSize(value->element_type);
    const uint64_t min_bytes =
        scalar != 0 ? scalar : (value->element_type == GgufValueType::kString ? 8 : 12);
    if (length > Remaining() / min_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("metadata key '", Sv(key), "': array length ",
                                                     length, " exceeds the ", Remaining(),
                                                     " bytes left in the file"));
    }
    if (scalar != 0) {
      value->scalar_elements = data_ + pos_;
      pos_ += length * scalar;
    } else if (value->element_type == GgufValueType::kString) {
      value->strings.resize(length);
      for (uint64_t i = 0; i < length; ++i) {
        KVSERVE_RETURN_IF_ERROR(
            ReadString(absl::StrCat("metadata key '", Sv(key), "'[", i, "]"), &value->strings[i]));
      }
    } else {
      // Inner arrays are written without a type tag of their own: element type, length, data.
      value->array.resize(length);
      for (uint64_t i = 0; i < length; ++i) {
        const auto array_type = static_cast<uint32_t>(GgufValueType::kArray);
        KVSERVE_RETURN_IF_ERROR(ReadValue(key, array_type, depth + 1, &value->array[i]));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadAlignment() {
    const GgufValue* value = file_->FindValue("general.alignment");
    if (value == nullptr) return absl::OkStatus();
    if (!IsIntegerType(value->type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("general.alignment has type ", TypeOf(*value), ", want an integer"));
    }
    const uint64_t alignment = value->uint_value;
    if (alignment == 0 || !std::has_single_bit(alignment) || alignment > (1u << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("general.alignment ", value->int_value,
                                                     " is not a power of two up to 1 MiB"));
    }
    file_->alignment_ = alignment;
    return absl::OkStatus();
  }

  absl::Status ReadTensorInfo(uint64_t index) {
    std::string_view name;
    KVSERVE_RETURN_IF_ERROR(ReadString(absl::StrCat("name of tensor #", index), &name));
    GgufTensorInfo info;
    info.name = std::string(name);
    const std::string what = absl::StrCat("tensor '", info.name, "'");
    uint32_t num_dims = 0;
    if (!ReadRaw(&num_dims, 4)) return Truncated(what);
    if (num_dims == 0 || num_dims > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat(Sv(what), ": ", num_dims, " dimensions (want 1 to ", kMaxDims, ")"));
    }
    int64_t num_elements = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      int64_t dim = 0;
      if (!ReadRaw(&dim, 8)) return Truncated(what);
      if (dim < 0 || (dim != 0 && num_elements > std::numeric_limits<int64_t>::max() / dim)) {
        return absl::InvalidArgumentError(
            absl::StrCat(Sv(what), ": dimension ", d, " = ", dim, " is negative or overflows"));
      }
      num_elements *= dim;
      info.dims.push_back(dim);
    }
    uint32_t type = 0;
    if (!ReadRaw(&type, 4) || !ReadRaw(&info.offset, 8)) return Truncated(what);
    info.type = static_cast<GgmlType>(type);
    int64_t block_elements = 0, block_bytes = 0;
    if (!GgmlTypeBlock(info.type, &block_elements, &block_bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(Sv(what), ": unsupported tensor type ", type, " (", GgmlTypeName(info.type),
                       "); supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K"));
    }
    if (info.dims[0] % block_elements != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(Sv(what), ": row length ", info.dims[0], " is not a multiple of the ",
                       GgmlTypeName(info.type), " block size ", block_elements));
    }
    const int64_t num_blocks = num_elements / block_elements;
    if (num_blocks > std::numeric_limits<int64_t>::max() / block_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": byte size overflows"));
    }
    info.num_bytes = static_cast<uint64_t>(num_blocks * block_bytes);
    if (info.offset % file_->alignment_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(what), ": data offset ", info.offset,
                                                     " is not a multiple of the alignment ",
                                                     file_->alignment_));
    }
    if (!file_->tensor_index_.emplace(info.name, file_->tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor name '", info.name, "'"));
    }
    file_->tensors_.push_back(std::move(info));
    return absl::OkStatus();
  }

  absl::Status PlaceTensorData() {
    const uint64_t alignment = file_->alignment_;
    const uint64_t data_start = (pos_ + alignment - 1) / alignment * alignment;
    if (data_start > size_ && !file_->tensors_.empty()) {
      return Truncated("the padding before the tensor data");
    }
    const uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
    for (GgufTensorInfo& info : file_->tensors_) {
      if (info.offset > data_size || info.num_bytes > data_size - info.offset) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", info.name, "': data [", info.offset, ", ", info.offset, " + ",
                         info.num_bytes, ") lies outside the ", data_size, "-byte data section"));
      }
      info.data = data_ + data_start + info.offset;
    }
    return absl::OkStatus();
  }

  const uint8_t* data_;  // [size_]
  uint64_t size_;
  uint64_t pos_ = 0;
  GgufFile* file_;
};

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::string_view bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  Parser parser(bytes, file.get());
  KVSERVE_RETURN_IF_ERROR(parser.Run());
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::Open(path));
  absl::StatusOr<std::unique_ptr<GgufFile>> file = Parse(mapping->bytes());
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(path, ": ", file.status().message()));
  }
  (*file)->mapping_ = std::move(mapping);
  return file;
}

GgufFile::~GgufFile() = default;

void GgufFile::DropPages(const uint8_t* data, uint64_t bytes) const {
  if (mapping_ != nullptr) mapping_->DropPages(reinterpret_cast<const char*>(data), bytes);
}

}  // namespace kvserve
