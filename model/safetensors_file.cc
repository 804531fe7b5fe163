#include "model/safetensors_file.h"

#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvserve {
namespace {

absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Bytes per element of a safetensors dtype; 0 for an unknown name.
int DtypeBytes(const std::string& dtype) {
  static const std::pair<const char*, int> kSizes[] = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
      {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : kSizes) {
    if (dtype == name) return size;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  if (absl::Status s = file->ParseBytes(mapping->bytes()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }
  file->mapping_ = std::move(mapping);
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(std::string_view bytes,
                                                                        std::string_view name) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  if (absl::Status s = file->ParseBytes(bytes); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(Sv(name), ": ", s.message()));
  }
  return file;
}

absl::Status SafetensorsFile::ParseBytes(std::string_view bytes) {
  uint64_t header_bytes = 0;
  if (bytes.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors truncated: ", bytes.size(), " bytes, no header length"));
  }
  std::memcpy(&header_bytes, bytes.data(), 8);
  if (header_bytes > kMaxHeaderBytes || header_bytes > bytes.size() - 8) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors header length ", header_bytes,
                                                   " exceeds the file (", bytes.size(),
                                                   " bytes) or the 100 MB limit"));
  }
  const std::string_view header = bytes.substr(8, header_bytes);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data()) + 8 + header_bytes;
  const uint64_t data_size = bytes.size() - 8 - header_bytes;
  const nlohmann::json json = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("safetensors header is not a JSON object");
  }
  for (const auto& item : json.items()) {
    const std::string& name = item.key();
    const nlohmann::json& entry = item.value();
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        return absl::InvalidArgumentError("safetensors __metadata__ is not an object");
      }
      for (const auto& [key, value] : entry.items()) {
        if (value.is_string()) metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    auto bad = [&name](std::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors tensor '", name, "': ", Sv(why)));
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() ||
        !entry.contains("shape") || !entry["shape"].is_array() || !entry.contains("data_offsets") ||
        !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2) {
      return bad("want {\"dtype\": string, \"shape\": [...], \"data_offsets\": [begin, end]}");
    }
    SafetensorsTensor tensor;
    tensor.name = name;
    tensor.dtype = entry["dtype"].get<std::string>();
    const int element_bytes = DtypeBytes(tensor.dtype);
    if (element_bytes == 0) return bad(absl::StrCat("unknown dtype '", tensor.dtype, "'"));
    if (tensor.dtype == "F32") {
      tensor.type = GgmlType::kF32;
    } else if (tensor.dtype == "F16") {
      tensor.type = GgmlType::kF16;
    } else if (tensor.dtype == "BF16") {
      tensor.type = GgmlType::kBF16;
    } else {
      return bad(absl::StrCat("unsupported dtype ", tensor.dtype, " (F32, F16, BF16)"));
    }
    int64_t num_elements = 1;
    for (const nlohmann::json& dim : entry["shape"]) {
      if (!dim.is_number_unsigned()) return bad("shape has a non-integer or negative entry");
      const uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (d != 0 && num_elements > std::numeric_limits<int64_t>::max() / element_bytes /
                                        static_cast<int64_t>(d))) {
        return bad("shape overflows");
      }
      num_elements *= static_cast<int64_t>(d);
      tensor.shape.push_back(static_cast<int64_t>(d));
    }
    const nlohmann::json& offsets = entry["data_offsets"];
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      return bad("data_offsets are not unsigned integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>();
    const uint64_t end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return bad(absl::StrCat("data_offsets [", begin, ", ", end, ") lie outside the ", data_size,
                              "-byte data section"));
    }
    const uint64_t want_bytes = static_cast<uint64_t>(num_elements) * element_bytes;
    if (end - begin != want_bytes) {
      return bad(
          absl::StrCat("data_offsets span ", end - begin, " bytes, the shape needs ", want_bytes));
    }
    tensor.num_elements = num_elements;
    tensor.data = data + begin;
    tensor.num_bytes = want_bytes;
    index_[tensor.name] = tensors_.size();
    tensors_.push_back(std::move(tensor));
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsFile::FindTensor(std::string_view name) const {
  auto it = index_.find(Sv(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace kvserve
