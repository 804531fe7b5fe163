// comm_bench: the Gloo all-reduce of a tensor-parallel step at 2 ranks on loopback (two
// threads of this process, TCP between them, as two CPU ranks of one host run): the hidden
// state of the default model (576 values) x 1..512 tokens, f32 and bf16 (bf16 is widened to
// fp32, summed and rounded back). Rank 1 mirrors the benchmark thread's calls: before each
// run, rank 0 broadcasts the run's shape and iteration count. Besides the mean (Time), each
// run reports the minimum, median and 90th percentile of its calls (min_us, p50_us, p90_us).
//   build/bench/comm_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/store_server.h"
#include "kernels/dtype.h"

namespace kvserve {
namespace {

constexpr int64_t kHiddenSize = 576;  // SmolLM2-135M, the default model

// What rank 0 tells rank 1 before each run; count 0 ends rank 1.
struct RunShape {
  int64_t count = 0;
  int64_t iterations = 0;
  kernels::DType dtype = kernels::DType::kF32;
};

// Both ranks of the group; rank 1 runs on its own thread until Stop().
class GlooPair {
 public:
  GlooPair() {
    server_ = Check(StoreServer::Start("127.0.0.1:0"));
    std::unique_ptr<Communicator> follower;
    std::thread join([&] { follower = Check(CreateGlooCommunicator(Options(1))); });
    leader_ = Check(CreateGlooCommunicator(Options(0)));
    join.join();
    server_.reset();
    follower_thread_ = std::thread([this, f = std::move(follower)] { Follow(*f); });
  }
  ~GlooPair() {
    // The follower ends on this broadcast, or on its timeout if the group has failed.
    RunShape stop;
    absl::Status stopped = leader_->Broadcast(&stop, sizeof(stop), 0);
    if (!stopped.ok()) std::fprintf(stderr, "stopping rank 1: %s\n", stopped.ToString().c_str());
    follower_thread_.join();
  }

  Communicator& leader() { return *leader_; }

 private:
  template <typename T>
  static T Check(absl::StatusOr<T> made) {
    if (!made.ok()) {
      std::fprintf(stderr, "comm_bench: %s\n", made.status().ToString().c_str());
      std::abort();
    }
    return std::move(*made);
  }

  CommOptions Options(int rank) const {
    CommOptions options;
    options.rank = rank;
    options.size = 2;
    options.leader_address = server_->address();
    options.server = rank == 0 ? server_.get() : nullptr;
    options.hostname = "127.0.0.1";
    return options;
  }

  static void Follow(Communicator& communicator) {
    std::vector<float> data;
    while (true) {
      RunShape shape;
      if (!communicator.Broadcast(&shape, sizeof(shape), 0).ok() || shape.count == 0) return;
      data.assign(shape.count, 0.0f);  // large enough for bf16 too (2 bytes a value)
      for (int64_t i = 0; i < shape.iterations; ++i) {
        if (!communicator.AllReduceSum(data.data(), shape.count, shape.dtype).ok()) return;
      }
    }
  }

  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<Communicator> leader_;
  std::thread follower_thread_;
};

GlooPair& Pair() {
  static GlooPair* pair = new GlooPair();  // ended by main, after the benchmarks
  return *pair;
}

void AllReduce(benchmark::State& state, kernels::DType dtype) {
  Communicator& leader = Pair().leader();
  RunShape shape;
  shape.count = kHiddenSize * state.range(0);
  shape.iterations = static_cast<int64_t>(state.max_iterations);
  shape.dtype = dtype;
  if (!leader.Broadcast(&shape, sizeof(shape), 0).ok()) {
    state.SkipWithError("the broadcast of the run's shape failed");
    return;
  }
  std::vector<float> data(shape.count, 0.0f);
  std::vector<double> times_us;
  times_us.reserve(shape.iterations);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status status = leader.AllReduceSum(data.data(), shape.count, dtype); !status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
    times_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  const int64_t bytes = shape.count * kernels::GetDTypeInfo(dtype).block_bytes;
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["bytes"] = static_cast<double>(bytes);
  // On a shared machine the mean carries every wait for a CPU; the quantiles show the call.
  std::sort(times_us.begin(), times_us.end());
  state.counters["min_us"] = times_us.front();
  state.counters["p50_us"] = times_us[times_us.size() / 2];
  state.counters["p90_us"] = times_us[times_us.size() * 9 / 10];
}

void BM_GlooAllReduceF32(benchmark::State& state) { AllReduce(state, kernels::DType::kF32); }
void BM_GlooAllReduceBF16(benchmark::State& state) { AllReduce(state, kernels::DType::kBF16); }

// Tokens per step: one decode token up to a 512-token prefill chunk.
BENCHMARK(BM_GlooAllReduceF32)->RangeMultiplier(2)->Range(1, 512)->UseRealTime();
BENCHMARK(BM_GlooAllReduceBF16)->Arg(1)->Arg(16)->Arg(512)->UseRealTime();

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  delete &kvserve::Pair();
  benchmark::Shutdown();
  return 0;
}
