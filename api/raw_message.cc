#include "api/raw_message.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "api/request_validation.h"
#include "google/protobuf/unknown_field_set.h"

namespace kvserve {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

std::optional<std::string> FindInvalidUtf8(const Descriptor& type, absl::string_view bytes,
                                           const std::string& prefix) {
  UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return std::nullopt;
  absl::flat_hash_map<int, int> occurrences;  // field number -> repeated index so far
  for (int i = 0; i < fields.field_count(); ++i) {
    const UnknownField& field = fields.field(i);
    if (field.type() != UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const FieldDescriptor* descriptor = type.FindFieldByNumber(field.number());
    if (descriptor == nullptr) continue;
    const int index = occurrences[field.number()]++;
    std::string path =
        prefix.empty() ? descriptor->name() : absl::StrCat(prefix, ".", descriptor->name());
    if (descriptor->is_repeated()) absl::StrAppend(&path, "[", index, "]");
    if (descriptor->type() == FieldDescriptor::TYPE_STRING) {
      if (!IsValidUtf8(field.length_delimited())) return path;
    } else if (descriptor->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (auto found =
              FindInvalidUtf8(*descriptor->message_type(), field.length_delimited(), path)) {
        return found;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> FindInvalidUtf8Field(const Descriptor& type, absl::string_view bytes) {
  return FindInvalidUtf8(type, bytes, "");
}

absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Valid() && buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  // Find bad UTF-8 before protobuf does: its parser would refuse the message and log an error.
  if (auto path = FindInvalidUtf8Field(*message->GetDescriptor(), bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(*path, ": must be valid UTF-8"));
  }
  if (!message->ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("request: not a valid ", message->GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

grpc::ByteBuffer ToByteBuffer(const google::protobuf::Message& message) {
  grpc::ByteBuffer buffer;
  bool own_buffer = false;
  // Serialization of an in-memory message only fails past 2 GiB, which our messages never reach.
  (void)grpc::SerializationTraits<google::protobuf::Message>::Serialize(message, &buffer,
                                                                        &own_buffer);
  return buffer;
}

}  // namespace kvserve
