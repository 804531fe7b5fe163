// The wire format of the rendezvous store (comm/store_server.h, comm/store_client.h): one
// request, one reply, over a TCP connection that carries any number of them in turn.
//
//   request: op (u8: 1 set, 2 get) | key bytes (u32) | value bytes (u32) | wait_ms (u64)
//            | key | value                               (value empty for get)
//   reply:   result (u8: 0 not set in time, 1 found, 2 aborted) | value bytes (u32) | value
//            (set: found, no value; aborted: the status the rendezvous was aborted with, as
//            EncodeStatus writes it)
//
// Integers little-endian. A get waits up to wait_ms on the server for the key to be set. Keys
// are at most kMaxKeyBytes and values kMaxValueBytes, so a garbled frame cannot make the server
// allocate without bound (it answers by closing the connection).
#ifndef KVSERVE_COMM_STORE_PROTOCOL_H_
#define KVSERVE_COMM_STORE_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve::store_protocol {

enum class Op : uint8_t { kSet = 1, kGet = 2 };

inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxValueBytes = 16u << 20;

struct Request {
  Op op = Op::kGet;
  std::string key;
  std::string value;     // set only
  uint64_t wait_ms = 0;  // get only
};

enum class Result : uint8_t { kNotFound = 0, kFound = 1, kAborted = 2 };

struct Reply {
  Result result = Result::kNotFound;
  std::string value;
};

// An aborted reply's value: the status code (u8) then the message.
std::string EncodeStatus(const absl::Status& status);
absl::Status DecodeStatus(const std::string& value);

absl::Status SendRequest(int fd, const Request& request, absl::Time deadline);
// INVALID_ARGUMENT for an unknown op or an oversized key or value; otherwise as net::RecvAll.
absl::StatusOr<Request> RecvRequest(int fd, absl::Time deadline);
absl::Status SendReply(int fd, const Reply& reply, absl::Time deadline);
absl::StatusOr<Reply> RecvReply(int fd, absl::Time deadline);

}  // namespace kvserve::store_protocol

#endif  // KVSERVE_COMM_STORE_PROTOCOL_H_
