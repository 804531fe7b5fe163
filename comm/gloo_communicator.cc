#include "comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "comm/collective_args.h"
#include "comm/rendezvous.h"
#include "kernels/dtype.h"

namespace kvserve {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration duration) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(duration));
}

void IgnoreSigpipeUnlessHandled() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

// Gloo's rendezvous keys live in our store under the rendezvous' "gloo/" namespace. Gloo reports
// failures by exception, so errors are thrown as gloo::IoException (carrying the status's
// message) and the status code is kept for the factory to return.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(Rendezvous* rendezvous) : rendezvous_(rendezvous) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Check(rendezvous_->store().Set(rendezvous_->Key(key),
                                   std::string_view(data.data(), data.size()),
                                   rendezvous_->deadline()));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> value =
        rendezvous_->store().Get(rendezvous_->Key(key), rendezvous_->deadline());
    Check(value.status());
    return std::vector<char>(value->begin(), value->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& key : keys) get(key);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);  // bounded by the rendezvous deadline
  }

  // The first error thrown (OK when none was).
  const absl::Status& error() const { return error_; }

 private:
  void Check(const absl::Status& status) {
    if (status.ok()) return;
    if (error_.ok()) error_ = status;
    throw gloo::IoException(std::string(status.message()));
  }

  Rendezvous* const rendezvous_;
  absl::Status error_;
};

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, absl::Duration timeout)
      : context_(std::move(context)), timeout_(timeout) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  const char* name() const override { return "gloo"; }

  absl::Status AllReduceSum(void* data, int64_t count, kernels::DType dtype) override;
  absl::Status AllGather(const void* in, void* out, size_t bytes) override;
  absl::Status Broadcast(void* data, size_t bytes, int root) override;
  absl::Status Barrier() override;

 private:
  absl::Status AllReduceF32(float* data, int64_t count);
  // Runs one Gloo collective; turns what it throws into a status and remembers it (failed_).
  absl::Status Run(const std::string& what, const std::function<void()>& collective);

  const std::shared_ptr<gloo::Context> context_;
  const absl::Duration timeout_;
  std::vector<float> widened_;  // bf16 all-reduce scratch: the values in fp32
  absl::Status failed_;         // the first collective error; returned by every later call
};

absl::Status GlooCommunicator::AllReduceSum(void* data, int64_t count, kernels::DType dtype) {
  if (!failed_.ok()) return failed_;
  KVSERVE_RETURN_IF_ERROR(comm_internal::CheckAllReduceArgs(count, dtype));
  if (dtype == kernels::DType::kF32) return AllReduceF32(static_cast<float*>(data), count);
  uint16_t* values = static_cast<uint16_t*>(data);
  widened_.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) widened_[i] = kernels::BFloat16ToFloat(values[i]);
  KVSERVE_RETURN_IF_ERROR(AllReduceF32(widened_.data(), count));
  for (int64_t i = 0; i < count; ++i) values[i] = kernels::FloatToBFloat16(widened_[i]);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllReduceF32(float* data, int64_t count) {
  if (count == 0) return absl::OkStatus();
  return Run(absl::StrCat("all-reduce of ", count, " values"), [&] {
    gloo::AllreduceOptions options(context_);
    options.setOutput(data, static_cast<size_t>(count));
    options.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    options.setTimeout(ToChrono(timeout_));
    gloo::allreduce(options);
  });
}

absl::Status GlooCommunicator::AllGather(const void* in, void* out, size_t bytes) {
  if (!failed_.ok()) return failed_;
  if (bytes == 0) return absl::OkStatus();
  return Run(absl::StrCat("all-gather of ", bytes, " bytes per rank"), [&] {
    gloo::AllgatherOptions options(context_);
    options.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    options.setOutput(static_cast<uint8_t*>(out), bytes * static_cast<size_t>(size()));
    options.setTimeout(ToChrono(timeout_));
    gloo::allgather(options);
  });
}

absl::Status GlooCommunicator::Broadcast(void* data, size_t bytes, int root) {
  if (!failed_.ok()) return failed_;
  KVSERVE_RETURN_IF_ERROR(comm_internal::CheckRoot(root, size()));
  if (bytes == 0) return absl::OkStatus();
  return Run(absl::StrCat("broadcast of ", bytes, " bytes from rank ", root), [&] {
    gloo::BroadcastOptions options(context_);
    options.setOutput(static_cast<uint8_t*>(data), bytes);
    options.setRoot(root);
    options.setTimeout(ToChrono(timeout_));
    gloo::broadcast(options);
  });
}

absl::Status GlooCommunicator::Barrier() {
  if (!failed_.ok()) return failed_;
  return Run("barrier", [&] {
    gloo::BarrierOptions options(context_);
    options.setTimeout(ToChrono(timeout_));
    gloo::barrier(options);
  });
}

absl::Status GlooCommunicator::Run(const std::string& what,
                                   const std::function<void()>& collective) {
  const absl::Time start = absl::Now();
  std::string error;
  try {
    collective();
    return absl::OkStatus();
  } catch (const std::exception& e) {  // gloo::IoException, gloo::EnforceNotMet, ...
    error = e.what();
  }
  const std::string where = absl::StrCat("gloo ", what, " on rank ", rank(), " of ", size());
  // Gloo says "Timed out" when a peer did not answer in time; a closed or reset connection
  // (a peer that died) fails at once.
  if (absl::StrContains(absl::AsciiStrToLower(error), "timed out") ||
      absl::Now() - start >= timeout_) {
    failed_ = absl::DeadlineExceededError(absl::StrCat(
        where, " did not complete within ", absl::FormatDuration(timeout_), ": ", error));
  } else {
    failed_ = absl::UnavailableError(absl::StrCat(where, " failed (a peer is gone): ", error));
  }
  return failed_;
}

// The context's full mesh, connected through the rendezvous store.
absl::StatusOr<std::shared_ptr<gloo::Context>> ConnectMesh(const CommOptions& options,
                                                           Rendezvous* rendezvous) {
  gloo::transport::tcp::attr attr;
  attr.hostname = options.hostname;
  attr.iface = options.interface;
  GlooStore store(rendezvous);
  try {
    std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(ToChrono(std::max(options.timeout, rendezvous->deadline() - absl::Now())));
    context->connectFullMesh(store, device);
    context->setTimeout(ToChrono(options.timeout));
    return std::shared_ptr<gloo::Context>(std::move(context));
  } catch (const std::exception& e) {
    if (!store.error().ok()) return store.error();
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, " of ", options.size,
                                               " cannot connect to its Gloo peers: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const CommOptions& options) {
  IgnoreSigpipeUnlessHandled();
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Rendezvous> rendezvous,
                           Rendezvous::Join(options, "gloo"));
  absl::StatusOr<std::shared_ptr<gloo::Context>> context = ConnectMesh(options, rendezvous.get());
  if (!context.ok()) {
    rendezvous->Abort(context.status());
    return context.status();
  }
  auto communicator = std::make_unique<GlooCommunicator>(std::move(*context), options.timeout);
  // Every rank has read the store once every rank has reached the barrier.
  if (absl::Status ready = communicator->Barrier(); !ready.ok()) {
    rendezvous->Abort(ready);
    return ready;
  }
  rendezvous->Finish();
  return communicator;
}

}  // namespace kvserve
