// Parsing requests ourselves: the methods whose requests carry text take the raw bytes
// (WithRawCallbackMethod_*) so that a malformed request gets INVALID_ARGUMENT naming the field.
// gRPC's own parsing would answer INTERNAL with no message, e.g. for a proto3 string field that
// is not valid UTF-8, which protobuf refuses to parse.
//
// Thread-safety: pure functions.
#ifndef KVSERVE_API_RAW_MESSAGE_H_
#define KVSERVE_API_RAW_MESSAGE_H_

#include <grpcpp/support/byte_buffer.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace kvserve {

// Parses `buffer` into `message`. INVALID_ARGUMENT "<field path>: must be valid UTF-8" when a
// string field holds invalid UTF-8, "request: ..." for any other malformed bytes.
absl::Status ParseRequest(const grpc::ByteBuffer& buffer, google::protobuf::Message* message);

// The serialized form of `message` as a ByteBuffer for StartWrite / unary responses.
grpc::ByteBuffer ToByteBuffer(const google::protobuf::Message& message);

// The path ("chat.messages[1].content") of the first string field of `type` in the wire bytes
// `bytes` that is not valid UTF-8; nullopt when there is none (or the bytes do not parse).
std::optional<std::string> FindInvalidUtf8Field(const google::protobuf::Descriptor& type,
                                                absl::string_view bytes);

}  // namespace kvserve

#endif  // KVSERVE_API_RAW_MESSAGE_H_
