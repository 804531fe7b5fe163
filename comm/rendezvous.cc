#include "comm/rendezvous.h"

#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace kvserve {
namespace {

std::string JoinedKey(int rank) { return absl::StrCat("joined/", rank); }

// "host pid N": who took a rank, for the leader's diagnostics.
std::string Identity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, " pid ", getpid());
}

}  // namespace

absl::StatusOr<std::unique_ptr<Rendezvous>> Rendezvous::Join(const CommOptions& options,
                                                             std::string_view group) {
  KVSERVE_RETURN_IF_ERROR(ValidateCommOptions(options));
  std::unique_ptr<Rendezvous> rendezvous(
      new Rendezvous(options, group, absl::Now() + options.connect_timeout));
  std::string address = options.leader_address;
  if (options.server != nullptr) {
    rendezvous->server_ = options.server;
    address = options.server->address();
  } else if (options.rank == 0) {
    absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start(address);
    if (!server.ok()) {
      return absl::Status(server.status().code(),
                          absl::StrCat("rank 0 cannot start the ", rendezvous->group_,
                                       " rendezvous store: ", server.status().message()));
    }
    rendezvous->owned_server_ = std::move(*server);
    rendezvous->server_ = rendezvous->owned_server_.get();
    address = rendezvous->server_->address();
  }
  absl::StatusOr<std::unique_ptr<StoreClient>> client =
      StoreClient::Connect(address, rendezvous->deadline_);
  if (!client.ok()) {
    return absl::Status(
        client.status().code(),
        absl::StrCat("rank ", options.rank, " of ", options.size, " cannot reach the leader's ",
                     rendezvous->group_, " rendezvous store within ",
                     absl::FormatDuration(options.connect_timeout),
                     " (is rank 0 running?): ", client.status().message()));
  }
  rendezvous->client_ = std::move(*client);
  absl::Status announced = rendezvous->client_->Set(rendezvous->Key(JoinedKey(options.rank)),
                                                    Identity(), rendezvous->deadline_);
  if (!announced.ok()) return announced;
  if (absl::Status all = rendezvous->WaitForAllRanks(); !all.ok()) {
    rendezvous->Abort(all);
    return all;
  }
  return rendezvous;
}

std::string Rendezvous::Key(std::string_view name) const {
  return group_ + "/" + std::string(name);
}

void Rendezvous::Finish() {
  owned_server_.reset();
  server_ = nullptr;
}

void Rendezvous::Abort(const absl::Status& status) {
  if (server_ != nullptr) server_->Abort(status);
  Finish();
}

absl::Status Rendezvous::WaitForAllRanks() {
  for (int rank = 0; rank < size_; ++rank) {
    absl::StatusOr<std::string> joined = client_->Get(Key(JoinedKey(rank)), deadline_);
    if (joined.ok()) continue;
    if (joined.status().code() != absl::StatusCode::kDeadlineExceeded) return joined.status();
    std::vector<int> missing;
    for (int other = rank; other < size_; ++other) {
      KVSERVE_ASSIGN_OR_RETURN(bool present, client_->Contains(Key(JoinedKey(other))));
      if (!present) missing.push_back(other);
    }
    return absl::DeadlineExceededError(absl::StrCat(
        missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "), " of ", size_,
        " did not join the ", group_, " group at ", client_->address(), " within ",
        absl::FormatDuration(connect_timeout_), " (seen from rank ", rank_, ")"));
  }
  return absl::OkStatus();
}

}  // namespace kvserve
