#include "comm/store_protocol.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "comm/socket_io.h"

namespace kvserve::store_protocol {
namespace {

constexpr size_t kRequestHeaderBytes = 1 + 4 + 4 + 8;
constexpr size_t kReplyHeaderBytes = 1 + 4;

void PutLe(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

uint64_t GetLe(const unsigned char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

}  // namespace

absl::Status SendRequest(int fd, const Request& request, absl::Time deadline) {
  std::string frame;
  frame.reserve(kRequestHeaderBytes + request.key.size() + request.value.size());
  PutLe(static_cast<uint8_t>(request.op), 1, &frame);
  PutLe(request.key.size(), 4, &frame);
  PutLe(request.value.size(), 4, &frame);
  PutLe(request.wait_ms, 8, &frame);
  frame += request.key;
  frame += request.value;
  return net::SendAll(fd, frame.data(), frame.size(), deadline);
}

absl::StatusOr<Request> RecvRequest(int fd, absl::Time deadline) {
  unsigned char header[kRequestHeaderBytes];
  KVSERVE_RETURN_IF_ERROR(net::RecvAll(fd, header, sizeof(header), deadline));
  Request request;
  const uint64_t op = GetLe(header, 1);
  const uint64_t key_bytes = GetLe(header + 1, 4);
  const uint64_t value_bytes = GetLe(header + 5, 4);
  request.wait_ms = GetLe(header + 9, 8);
  if (op != static_cast<uint8_t>(Op::kSet) && op != static_cast<uint8_t>(Op::kGet)) {
    return absl::InvalidArgumentError(absl::StrCat("store request with unknown op ", op));
  }
  if (key_bytes > kMaxKeyBytes || value_bytes > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("store request with a ", key_bytes,
                                                   "-byte key and a ", value_bytes,
                                                   "-byte value (too large)"));
  }
  request.op = static_cast<Op>(op);
  request.key.resize(key_bytes);
  request.value.resize(value_bytes);
  KVSERVE_RETURN_IF_ERROR(net::RecvAll(fd, request.key.data(), key_bytes, deadline));
  KVSERVE_RETURN_IF_ERROR(net::RecvAll(fd, request.value.data(), value_bytes, deadline));
  return request;
}

absl::Status SendReply(int fd, const Reply& reply, absl::Time deadline) {
  std::string frame;
  frame.reserve(kReplyHeaderBytes + reply.value.size());
  PutLe(static_cast<uint8_t>(reply.result), 1, &frame);
  PutLe(reply.value.size(), 4, &frame);
  frame += reply.value;
  return net::SendAll(fd, frame.data(), frame.size(), deadline);
}

absl::StatusOr<Reply> RecvReply(int fd, absl::Time deadline) {
  unsigned char header[kReplyHeaderBytes];
  KVSERVE_RETURN_IF_ERROR(net::RecvAll(fd, header, sizeof(header), deadline));
  Reply reply;
  if (header[0] > static_cast<uint8_t>(Result::kAborted)) {
    return absl::InvalidArgumentError(absl::StrCat("store reply with unknown result ", header[0]));
  }
  reply.result = static_cast<Result>(header[0]);
  const uint64_t value_bytes = GetLe(header + 1, 4);
  if (value_bytes > kMaxValueBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store reply with a ", value_bytes, "-byte value (too large)"));
  }
  reply.value.resize(value_bytes);
  KVSERVE_RETURN_IF_ERROR(net::RecvAll(fd, reply.value.data(), value_bytes, deadline));
  return reply;
}

std::string EncodeStatus(const absl::Status& status) {
  std::string value(1, static_cast<char>(static_cast<uint8_t>(status.code())));
  value += std::string(status.message());
  return value;
}

absl::Status DecodeStatus(const std::string& value) {
  if (value.empty()) return absl::UnknownError("the store was aborted without a reason");
  const auto code = static_cast<absl::StatusCode>(static_cast<uint8_t>(value[0]));
  return absl::Status(code == absl::StatusCode::kOk ? absl::StatusCode::kUnknown : code,
                      value.substr(1));
}

}  // namespace kvserve::store_protocol
