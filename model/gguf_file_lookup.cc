// GgufFile's typed metadata lookups (the parser is in gguf_file.cc).
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/gguf_file.h"

namespace kvserve {
namespace {

// absl here is built with its own string_view type; std::string_view converts explicitly.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string StoredType(const GgufValue& value) {
  if (value.type == GgufValueType::kArray) {
    return absl::StrCat("array[", GgufValueTypeName(value.element_type), "]");
  }
  return GgufValueTypeName(value.type);
}

absl::Status WrongType(std::string_view key, const GgufValue& value, std::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("GGUF metadata key '", Sv(key), "' has type ",
                                                 StoredType(value), ", want ", Sv(want)));
}

// Element i of a packed scalar array, decoded like a scalar value.
template <typename T>
T LoadElement(const uint8_t* elements, uint64_t i) {
  T v;
  std::memcpy(&v, elements + i * sizeof(T), sizeof(T));
  return v;
}

int64_t IntElement(const GgufValue& array, uint64_t i) {
  const uint8_t* p = array.scalar_elements;  // [array_length] packed
  switch (array.element_type) {
    case GgufValueType::kUint8:
      return LoadElement<uint8_t>(p, i);
    case GgufValueType::kInt8:
      return LoadElement<int8_t>(p, i);
    case GgufValueType::kUint16:
      return LoadElement<uint16_t>(p, i);
    case GgufValueType::kInt16:
      return LoadElement<int16_t>(p, i);
    case GgufValueType::kUint32:
      return LoadElement<uint32_t>(p, i);
    case GgufValueType::kInt32:
      return LoadElement<int32_t>(p, i);
    case GgufValueType::kUint64:
      return static_cast<int64_t>(LoadElement<uint64_t>(p, i));
    case GgufValueType::kInt64:
      return LoadElement<int64_t>(p, i);
    default:
      return 0;
  }
}

}  // namespace

const GgufValue* GgufFile::FindValue(std::string_view key) const {
  auto it = values_.find(Sv(key));
  return it == values_.end() ? nullptr : &it->second;
}

bool GgufFile::Has(std::string_view key) const { return FindValue(key) != nullptr; }

absl::StatusOr<const GgufValue*> GgufFile::Lookup(std::string_view key) const {
  const GgufValue* value = FindValue(key);
  if (value == nullptr) {
    return absl::NotFoundError(absl::StrCat("GGUF metadata key '", Sv(key), "' not found"));
  }
  return value;
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  if (value->type != GgufValueType::kString) return WrongType(key, *value, "string");
  return std::string(value->string_value);
}

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  if (!IsIntegerType(value->type)) return WrongType(key, *value, "an integer");
  return value->int_value;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  if (value->type != GgufValueType::kFloat32 && value->type != GgufValueType::kFloat64) {
    return WrongType(key, *value, "float32 or float64");
  }
  return value->float_value;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  if (value->type != GgufValueType::kBool) return WrongType(key, *value, "bool");
  return value->int_value != 0;
}

absl::StatusOr<int64_t> GgufFile::GetArrayLength(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  if (value->type != GgufValueType::kArray) return WrongType(key, *value, "an array");
  return static_cast<int64_t>(value->array_length);
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  if (value->type != GgufValueType::kArray || value->element_type != GgufValueType::kString) {
    return WrongType(key, *value, "array[string]");
  }
  return std::vector<std::string>(value->strings.begin(), value->strings.end());
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  const GgufValue& array = *value;
  if (array.type != GgufValueType::kArray || !IsIntegerType(array.element_type)) {
    return WrongType(key, array, "array of integers");
  }
  std::vector<int64_t> out(array.array_length);
  for (uint64_t i = 0; i < array.array_length; ++i) out[i] = IntElement(array, i);
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  KVSERVE_ASSIGN_OR_RETURN(const GgufValue* value, Lookup(key));
  const GgufValue& array = *value;
  const bool f32 = array.element_type == GgufValueType::kFloat32;
  if (array.type != GgufValueType::kArray ||
      (!f32 && array.element_type != GgufValueType::kFloat64)) {
    return WrongType(key, array, "array of float32 or float64");
  }
  std::vector<double> out(array.array_length);
  for (uint64_t i = 0; i < array.array_length; ++i) {
    out[i] = f32 ? LoadElement<float>(array.scalar_elements, i)
                 : LoadElement<double>(array.scalar_elements, i);
  }
  return out;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(Sv(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvserve
