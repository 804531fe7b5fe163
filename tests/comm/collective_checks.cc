#include "tests/comm/collective_checks.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/dtype.h"

namespace kvserve::testing {
namespace {

// Rank r's f32 input: small integers, so every sum is exact in fp32.
float IntegerValue(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * (i % 97) - (i % 13) * rank);
}

// Rank r's bf16 input (before rounding to bf16).
float FractionValue(int rank, int64_t i) {
  return 0.013f * static_cast<float>((rank + 3) * (i % 41)) - 0.25f * static_cast<float>(rank);
}

uint8_t ByteValue(int rank, size_t i) { return static_cast<uint8_t>(rank * 31 + i * 7 + 1); }

absl::Status CheckF32Sum(Communicator& communicator, int64_t count) {
  std::vector<float> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) data[i] = IntegerValue(communicator.rank(), i);
  absl::Status status = communicator.AllReduceSum(data.data(), count, kernels::DType::kF32);
  if (!status.ok()) return status;
  for (int64_t i = 0; i < count; ++i) {
    float expected = 0;
    for (int rank = 0; rank < communicator.size(); ++rank) expected += IntegerValue(rank, i);
    if (data[i] != expected) {
      return absl::InternalError(absl::StrCat("rank ", communicator.rank(), ": f32 sum of ", count,
                                              " values: [", i, "] = ", data[i], ", want ",
                                              expected));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBf16Sum(Communicator& communicator, int64_t count) {
  std::vector<uint16_t> data(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    data[i] = kernels::FloatToBFloat16(FractionValue(communicator.rank(), i));
  }
  absl::Status status = communicator.AllReduceSum(data.data(), count, kernels::DType::kBF16);
  if (!status.ok()) return status;
  for (int64_t i = 0; i < count; ++i) {
    double expected = 0;
    for (int rank = 0; rank < communicator.size(); ++rank) {
      expected += kernels::BFloat16ToFloat(kernels::FloatToBFloat16(FractionValue(rank, i)));
    }
    const double got = kernels::BFloat16ToFloat(data[i]);
    // One rounding to bf16 (8 significant bits) plus the fp32 sum's own error.
    if (std::abs(got - expected) > std::abs(expected) * std::ldexp(1.0, -8) + 1e-6) {
      return absl::InternalError(absl::StrCat("rank ", communicator.rank(), ": bf16 sum of ", count,
                                              " values: [", i, "] = ", got, ", want ", expected));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckAllGather(Communicator& communicator, size_t bytes) {
  std::vector<uint8_t> in(bytes);
  for (size_t i = 0; i < bytes; ++i) in[i] = ByteValue(communicator.rank(), i);
  std::vector<uint8_t> out(bytes * communicator.size(), 0xEE);
  absl::Status status = communicator.AllGather(in.data(), out.data(), bytes);
  if (!status.ok()) return status;
  for (int rank = 0; rank < communicator.size(); ++rank) {
    for (size_t i = 0; i < bytes; ++i) {
      if (out[rank * bytes + i] != ByteValue(rank, i)) {
        return absl::InternalError(absl::StrCat("rank ", communicator.rank(), ": all-gather: byte ",
                                                i, " of rank ", rank, " is wrong"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcast(Communicator& communicator, size_t bytes) {
  const int root = communicator.size() - 1;
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = ByteValue(communicator.rank(), i);
  absl::Status status = communicator.Broadcast(data.data(), bytes, root);
  if (!status.ok()) return status;
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] != ByteValue(root, i)) {
      return absl::InternalError(absl::StrCat("rank ", communicator.rank(), ": broadcast from ",
                                              root, ": byte ", i, " is wrong"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunCollectiveChecks(Communicator& communicator) {
  // 576 is the default model's hidden size; 300001 spans several of Gloo's segments.
  for (int64_t count :
       {int64_t{0}, int64_t{1}, int64_t{576}, int64_t{576 * 7 + 3}, int64_t{300001}}) {
    KVSERVE_RETURN_IF_ERROR(CheckF32Sum(communicator, count));
  }
  for (int64_t count : {int64_t{5}, int64_t{576 * 3}}) {
    KVSERVE_RETURN_IF_ERROR(CheckBf16Sum(communicator, count));
  }
  for (size_t bytes : {size_t{1}, size_t{37}, size_t{4096}}) {
    KVSERVE_RETURN_IF_ERROR(CheckAllGather(communicator, bytes));
    KVSERVE_RETURN_IF_ERROR(CheckBroadcast(communicator, bytes));
  }
  return communicator.Barrier();
}

}  // namespace kvserve::testing
