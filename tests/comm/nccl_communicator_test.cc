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

namespace kvserve {
namespace {

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
    ASSERT_TRUE(communicator.ok()) << communicator.status();
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
  ASSERT_TRUE(communicator_->AllReduceSum(f32, values.size(), kernels::DType::kF32).ok());
  EXPECT_EQ(ToHost(f32, values.size()), values);

  std::vector<uint16_t> halves(values.size());
  for (size_t i = 0; i < values.size(); ++i) halves[i] = kernels::FloatToBFloat16(values[i]);
  uint16_t* bf16 = ToDevice(halves);
  ASSERT_TRUE(communicator_->AllReduceSum(bf16, halves.size(), kernels::DType::kBF16).ok());
  EXPECT_EQ(ToHost(bf16, halves.size()), halves);
  EXPECT_TRUE(communicator_->AllReduceSum(f32, 0, kernels::DType::kF32).ok());
}

TEST_F(NcclCommunicatorTest, AllGatherBroadcastAndBarrierOnDeviceBuffers) {
  const std::vector<uint8_t> bytes = {3, 1, 4, 1, 5, 9, 2, 6};
  uint8_t* in = ToDevice(bytes);
  uint8_t* out = ToDevice(std::vector<uint8_t>(bytes.size(), 0));
  ASSERT_TRUE(communicator_->AllGather(in, out, bytes.size()).ok());
  EXPECT_EQ(ToHost(out, bytes.size()), bytes);
  ASSERT_TRUE(communicator_->Broadcast(in, bytes.size(), 0).ok());
  EXPECT_EQ(ToHost(in, bytes.size()), bytes);
  EXPECT_TRUE(communicator_->Barrier().ok());
}

TEST_F(NcclCommunicatorTest, BadArgumentsAreRefusedAndTheGroupStaysUsable) {
  float* value = ToDevice(std::vector<float>{1.0f});
  EXPECT_EQ(communicator_->AllReduceSum(value, 1, kernels::DType::kF16).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(communicator_->Broadcast(value, 4, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(communicator_->AllReduceSum(value, 1, kernels::DType::kF32).ok());
  EXPECT_TRUE(communicator_->Barrier().ok());
}

TEST_F(NcclCommunicatorTest, ReportsTheAllReduceTimeAtTheDefaultHiddenSize) {
  for (int tokens : {1, 64, 512}) {
    const size_t count = size_t{576} * tokens;
    float* data = ToDevice(std::vector<float>(count, 1.0f));
    const int iterations = 200;
    ASSERT_TRUE(communicator_->AllReduceSum(data, count, kernels::DType::kF32).ok());  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      ASSERT_TRUE(communicator_->AllReduceSum(data, count, kernels::DType::kF32).ok());
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
