// The NCCL communicator on a one-GPU group (the check machine has one GPU): every collective on
// device buffers through the CUDA backend made by kernels::CreateBackend, as a worker rank
// makes them; bad arguments refused without breaking the group; one line of figures (the
// all-reduce time at the default model's hidden size). Skips (GTEST_SKIP) where no CUDA device
// is present; ctest label gpu; scripts/gpu_check.sh runs it.
#include "comm/nccl/nccl_communicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend_factory.h"
#include "kernels/dtype.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    backend_ = kernels::CreateBackend("cuda", 0, &error);
    if (backend_ == nullptr) GTEST_SKIP() << "no CUDA backend: " << error;
    CommOptions options;
    options.leader_address = "127.0.0.1:0";  // a group of one: nobody else looks for the store
    options.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<Communicator>> communicator =
        CreateNcclCommunicator(options, backend_.get());
    KVSERVE_ASSERT_OK(communicator);
    communicator_ = std::move(*communicator);
  }
  void TearDown() override {
    communicator_.reset();
    for (void* buffer : buffers_) backend_->Free(buffer);
  }

  // A device copy of `host`, freed at the end of the test.
  template <typename T>
  T* ToDevice(const std::vector<T>& host) {
    void* device = backend_->Allocate(host.size() * sizeof(T));
    EXPECT_NE(device, nullptr);
    buffers_.push_back(device);
    backend_->CopyToDevice(device, host.data(), host.size() * sizeof(T));
    return static_cast<T*>(device);
  }
  template <typename T>
  std::vector<T> ToHost(const T* device, size_t count) {
    std::vector<T> host(count);
    backend_->CopyToHost(host.data(), device, count * sizeof(T));
    EXPECT_TRUE(backend_->Synchronize());
    return host;
  }

  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<Communicator> communicator_;
  std::vector<void*> buffers_;
};

TEST_F(NcclCommunicatorTest, IsRankZeroOfOne) {
  EXPECT_EQ(communicator_->rank(), 0);
  EXPECT_EQ(communicator_->size(), 1);
  EXPECT_STREQ(communicator_->name(), "nccl");
}

TEST_F(NcclCommunicatorTest, AllReduceOfOneRankKeepsF32AndBf16Values) {
  std::vector<float> values(576 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 101) - 50.5f;
  float* f32 = ToDevice(values);
  KVSERVE_ASSERT_OK(communicator_->AllReduceSum(f32, values.size(), kernels::DType::kF32));
  EXPECT_EQ(ToHost(f32, values.size()), values);

  std::vector<uint16_t> halves(values.size());
  for (size_t i = 0; i < values.size(); ++i) halves[i] = kernels::FloatToBFloat16(values[i]);
  uint16_t* bf16 = ToDevice(halves);
  KVSERVE_ASSERT_OK(communicator_->AllReduceSum(bf16, halves.size(), kernels::DType::kBF16));
  EXPECT_EQ(ToHost(bf16, halves.size()), halves);
  KVSERVE_EXPECT_OK(communicator_->AllReduceSum(f32, 0, kernels::DType::kF32));
}

TEST_F(NcclCommunicatorTest, AllGatherBroadcastAndBarrierOnDeviceBuffers) {
  const std::vector<uint8_t> bytes = {3, 1, 4, 1, 5, 9, 2, 6};
  uint8_t* in = ToDevice(bytes);
  uint8_t* out = ToDevice(std::vector<uint8_t>(bytes.size(), 0));
  KVSERVE_ASSERT_OK(communicator_->AllGather(in, out, bytes.size()));
  EXPECT_EQ(ToHost(out, bytes.size()), bytes);
  KVSERVE_ASSERT_OK(communicator_->Broadcast(in, bytes.size(), 0));
  EXPECT_EQ(ToHost(in, bytes.size()), bytes);
  KVSERVE_EXPECT_OK(communicator_->Barrier());
}

TEST_F(NcclCommunicatorTest, BadArgumentsAreRefusedAndTheGroupStaysUsable) {
  float* value = ToDevice(std::vector<float>{1.0f});
  EXPECT_THAT(communicator_->AllReduceSum(value, 1, kernels::DType::kF16),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(communicator_->Broadcast(value, 4, 1), StatusIs(absl::StatusCode::kInvalidArgument));
  KVSERVE_EXPECT_OK(communicator_->AllReduceSum(value, 1, kernels::DType::kF32));
  KVSERVE_EXPECT_OK(communicator_->Barrier());
}

TEST_F(NcclCommunicatorTest, ReportsTheAllReduceTimeAtTheDefaultHiddenSize) {
  for (int tokens : {1, 64, 512}) {
    const size_t count = size_t{576} * tokens;
    float* data = ToDevice(std::vector<float>(count, 1.0f));
    const int iterations = 200;
    KVSERVE_ASSERT_OK(communicator_->AllReduceSum(data, count, kernels::DType::kF32));  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      KVSERVE_ASSERT_OK(communicator_->AllReduceSum(data, count, kernels::DType::kF32));
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        iterations;
    std::printf("nccl size-1 all-reduce of 576 x %d f32 (issued and waited for): %.1f us\n", tokens,
                us);
  }
}

}  // namespace
}  // namespace kvserve
