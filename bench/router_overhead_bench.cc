// Router overhead: time to first token of the same request sent straight to a worker and through
// a kvserve-router in front of that worker, on live processes (bench/router_overhead.sh starts
// them on loopback and passes their addresses).
//
//   router_overhead_bench --worker=127.0.0.1:50061 --router=127.0.0.1:50051
//
// Each iteration is one Generate call: a fixed 64-token prompt (prefix-cached after the first
// call, on both paths alike), greedy, max_tokens 1, timed from the call's start to its first
// response message. Iterations are timed manually, so the reported Time is the mean TTFT;
// counters p50_us / p99_us are the percentiles. BM_Ttft/1 is the worker directly, BM_Ttft/0 the
// router; the difference is what routing, tokenizing-free dispatch and one more gRPC hop cost.
// `threads` streams run at once (the same load on both paths).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kvserve/v1/generation.grpc.pb.h"

namespace {

namespace v1 = kvserve::v1;

std::string g_worker = "127.0.0.1:50061";
std::string g_router = "127.0.0.1:50051";

v1::GenerateRequest MakeRequest() {
  v1::GenerateRequest request;
  for (int i = 0; i < 64; ++i) request.mutable_prompt_token_ids()->add_ids(1000 + 37 * i);
  request.mutable_sampling()->set_temperature(0);
  request.mutable_sampling()->set_max_tokens(1);
  return request;
}

// Latencies of the current benchmark run, from every thread.
std::mutex g_mu;
std::vector<double> g_latencies_us;

void BM_Ttft(benchmark::State& state) {
  const bool direct = state.range(0) == 1;
  auto stub = v1::Generation::NewStub(
      grpc::CreateChannel(direct ? g_worker : g_router, grpc::InsecureChannelCredentials()));
  const v1::GenerateRequest request = MakeRequest();
  if (state.thread_index() == 0) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_latencies_us.clear();
  }
  std::vector<double> mine;
  for (auto _ : state) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    const auto start = std::chrono::steady_clock::now();
    auto reader = stub->Generate(&context, request);
    v1::GenerateResponse response;
    bool first = reader->Read(&response);
    const auto ttft = std::chrono::steady_clock::now() - start;
    while (reader->Read(&response)) {
    }
    grpc::Status status = reader->Finish();
    if (!first || !status.ok()) {
      state.SkipWithError(("Generate failed: " + status.error_message()).c_str());
      break;
    }
    const double seconds = std::chrono::duration<double>(ttft).count();
    state.SetIterationTime(seconds);
    mine.push_back(seconds * 1e6);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_latencies_us.insert(g_latencies_us.end(), mine.begin(), mine.end());
  if (state.thread_index() == 0 && !g_latencies_us.empty()) {
    // Thread 0 may finish before others; the percentiles then cover the threads done so far.
    std::vector<double> all = g_latencies_us;
    std::sort(all.begin(), all.end());
    auto at = [&](double q) { return all[std::min(all.size() - 1, size_t(q * all.size()))]; };
    state.counters["p50_us"] = at(0.50);
    state.counters["p99_us"] = at(0.99);
  }
  state.SetLabel(direct ? "worker" : "router");
}
BENCHMARK(BM_Ttft)
    ->ArgName("direct")
    ->Arg(1)
    ->Arg(0)
    ->UseManualTime()
    ->MinTime(3.0)
    ->Threads(1)
    ->Threads(4);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--worker=", 9) == 0) {
      g_worker = argv[i] + 9;
    } else if (std::strncmp(argv[i], "--router=", 9) == 0) {
      g_router = argv[i] + 9;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
