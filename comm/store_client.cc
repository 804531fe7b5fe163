#include "comm/store_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/store_protocol.h"

namespace kvserve {
namespace {

// How long after a get's wait ends its reply may take to arrive before the server counts as
// gone.
constexpr absl::Duration kReplyGrace = absl::Seconds(5);

}  // namespace

absl::StatusOr<std::unique_ptr<StoreClient>> StoreClient::Connect(std::string_view address,
                                                                  absl::Time deadline) {
  KVSERVE_ASSIGN_OR_RETURN(net::HostPort host_port, net::ParseHostPort(address));
  KVSERVE_ASSIGN_OR_RETURN(net::Socket socket, net::ConnectWithRetry(host_port, deadline));
  return std::unique_ptr<StoreClient>(new StoreClient(std::move(socket), std::string(address)));
}

absl::Status StoreClient::Set(std::string_view key, std::string_view value, absl::Time deadline) {
  store_protocol::Request request;
  request.op = store_protocol::Op::kSet;
  request.key = std::string(key);
  request.value = std::string(value);
  absl::Status sent = store_protocol::SendRequest(socket_.fd(), request, deadline);
  if (!sent.ok()) {
    return absl::Status(
        sent.code(), absl::StrCat("setting \"", std::string(key), "\" in the store at ", address_,
                                  ": ", sent.message()));
  }
  absl::StatusOr<store_protocol::Reply> reply = store_protocol::RecvReply(socket_.fd(), deadline);
  if (!reply.ok()) {
    return absl::Status(reply.status().code(),
                        absl::StrCat("setting \"", std::string(key), "\" in the store at ",
                                     address_, ": ", reply.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<bool, std::string>> StoreClient::Fetch(std::string_view key,
                                                                absl::Time wait_until) {
  store_protocol::Request request;
  request.op = store_protocol::Op::kGet;
  request.key = std::string(key);
  request.wait_ms = static_cast<uint64_t>(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(wait_until - absl::Now())));
  const absl::Time reply_deadline = absl::Now() + absl::Milliseconds(request.wait_ms) + kReplyGrace;
  absl::Status sent = store_protocol::SendRequest(socket_.fd(), request, reply_deadline);
  absl::StatusOr<store_protocol::Reply> reply =
      sent.ok() ? store_protocol::RecvReply(socket_.fd(), reply_deadline)
                : absl::StatusOr<store_protocol::Reply>(sent);
  if (!reply.ok()) {
    // The server did not answer in time: it is as good as gone.
    const absl::StatusCode code = reply.status().code() == absl::StatusCode::kDeadlineExceeded
                                      ? absl::StatusCode::kUnavailable
                                      : reply.status().code();
    return absl::Status(code, absl::StrCat("getting \"", std::string(key), "\" from the store at ",
                                           address_, ": ", reply.status().message()));
  }
  if (reply->result == store_protocol::Result::kAborted) {
    absl::Status aborted = store_protocol::DecodeStatus(reply->value);
    return absl::Status(aborted.code(), absl::StrCat("the rendezvous at ", address_,
                                                     " was aborted: ", aborted.message()));
  }
  return std::make_pair(reply->result == store_protocol::Result::kFound, std::move(reply->value));
}

absl::StatusOr<std::string> StoreClient::Get(std::string_view key, absl::Time deadline) {
  KVSERVE_ASSIGN_OR_RETURN(auto fetched, Fetch(key, deadline));
  if (!fetched.first) {
    return absl::DeadlineExceededError(absl::StrCat(
        "\"", std::string(key), "\" was not set in the store at ", address_, " in time"));
  }
  return std::move(fetched.second);
}

absl::StatusOr<bool> StoreClient::Contains(std::string_view key) {
  KVSERVE_ASSIGN_OR_RETURN(auto fetched, Fetch(key, absl::Now()));
  return fetched.first;
}

}  // namespace kvserve
