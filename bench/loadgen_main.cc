// kvserve-loadgen: drives a worker (or router) with N concurrent Generate streams and reports
// throughput and latency as a client sees them, plus the worker's peak KV cache usage.
//
//   kvserve-loadgen --target=127.0.0.1:50061 --concurrency=8 --num_requests=32
//       --prompt_len=64:256 --output_len=32:128 --shared_prefix_len=0
//
// Each request is a prompt of random token ids (length uniform in --prompt_len, the first
// --shared_prefix_len ids shared by all requests so the prefix cache can serve them) and exactly
// an output length uniform in --output_len tokens (ignore_eos, greedy). Streams use the gRPC
// callback client API; a new request starts as soon as one finishes, keeping --concurrency in
// flight. Peak KV usage comes from Worker.StreamStatus (used / total blocks), sampled by a
// separate stream for the whole run (--no_status for a router target).
//
// Reported: output tokens/s (all output tokens / wall time from first start to last finish),
// TTFT p50/p90/p99 (call start to first token), inter-token latency p50/p99/p99.9 (gap between
// token arrivals within a stream, split evenly when one message holds several tokens), e2e
// latency, peak KV usage; as text and as one JSON line.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/loadgen_stats.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/worker.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50061", "host:port of the worker or router");
ABSL_FLAG(int32_t, concurrency, 8, "Streams in flight at once");
ABSL_FLAG(int32_t, num_requests, 0, "Requests in all (0: 4 x concurrency)");
ABSL_FLAG(std::string, prompt_len, "128:128", "Prompt tokens, min:max (uniform)");
ABSL_FLAG(std::string, output_len, "64:64",
          "Output tokens, min:max (uniform, exact via ignore_eos)");
ABSL_FLAG(int32_t, shared_prefix_len, 0, "Leading prompt tokens shared by every request");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the prompt and length draws");
ABSL_FLAG(int32_t, vocab_low, 1000, "Smallest token id drawn for prompts");
ABSL_FLAG(int32_t, vocab_high, 40000, "Largest token id drawn for prompts (exclusive)");
ABSL_FLAG(bool, no_status, false, "Do not open Worker.StreamStatus (e.g. for a router target)");
ABSL_FLAG(double, timeout_s, 600, "Deadline of each request");

namespace kvserve {
namespace {

namespace v1 = ::kvserve::v1;

struct Range {
  int32_t min = 0;
  int32_t max = 0;
};

bool ParseRange(const std::string& text, Range* range) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() == 1) parts.push_back(parts[0]);
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], &range->min) &&
         absl::SimpleAtoi(parts[1], &range->max) && range->min >= 1 && range->max >= range->min;
}

// One request's measurements.
struct RequestRecord {
  absl::Duration ttft = absl::InfiniteDuration();
  absl::Duration e2e;
  std::vector<double> inter_token_s;
  int64_t output_tokens = 0;
  bool ok = false;
  std::string error;
};

class Run;

// One Generate stream (gRPC callback client reactor). Deletes itself in OnDone after reporting.
class StreamReactor : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  StreamReactor(Run* run, v1::Generation::Stub* stub, v1::GenerateRequest request,
                absl::Duration timeout);
  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  Run* const run_;
  grpc::ClientContext context_;
  v1::GenerateRequest request_;
  v1::GenerateResponse response_;
  absl::Time start_;
  absl::Time last_token_;
  RequestRecord record_;
};

class Run {
 public:
  Run(v1::Generation::Stub* stub, std::vector<v1::GenerateRequest> requests, int32_t concurrency,
      absl::Duration timeout)
      : stub_(stub), requests_(std::move(requests)), concurrency_(concurrency), timeout_(timeout) {}

  // Runs every request; returns the records and the wall time.
  std::vector<RequestRecord> Execute(absl::Duration* wall) {
    const absl::Time start = absl::Now();
    const int32_t initial = std::min<int32_t>(concurrency_, static_cast<int32_t>(requests_.size()));
    for (int32_t i = 0; i < initial; ++i) StartNext();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](Run* run) { return run->records_.size() == run->requests_.size(); }, this));
    *wall = absl::Now() - start;
    return records_;
  }

  void Finished(RequestRecord record) {
    {
      absl::MutexLock lock(&mu_);
      records_.push_back(std::move(record));
    }
    StartNext();
  }

 private:
  void StartNext() {
    const size_t index = next_.fetch_add(1);
    if (index >= requests_.size()) return;
    new StreamReactor(this, stub_, requests_[index], timeout_);
  }

  v1::Generation::Stub* const stub_;
  const std::vector<v1::GenerateRequest> requests_;
  const int32_t concurrency_;
  const absl::Duration timeout_;
  std::atomic<size_t> next_{0};
  absl::Mutex mu_;
  std::vector<RequestRecord> records_ ABSL_GUARDED_BY(mu_);
};

StreamReactor::StreamReactor(Run* run, v1::Generation::Stub* stub, v1::GenerateRequest request,
                             absl::Duration timeout)
    : run_(run), request_(std::move(request)) {
  context_.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  start_ = absl::Now();
  last_token_ = start_;
  stub->async()->Generate(&context_, &request_, this);
  StartRead(&response_);
  StartCall();
}

void StreamReactor::OnReadDone(bool ok) {
  if (!ok) return;  // OnDone follows
  const absl::Time now = absl::Now();
  int64_t tokens = 0;
  for (const v1::ChoiceDelta& delta : response_.choices()) tokens += delta.token_ids_size();
  if (tokens > 0) {
    if (record_.output_tokens == 0) {
      record_.ttft = now - start_;
    } else {
      const double gap_s = absl::ToDoubleSeconds(now - last_token_) / static_cast<double>(tokens);
      for (int64_t i = 0; i < tokens; ++i) record_.inter_token_s.push_back(gap_s);
    }
    record_.output_tokens += tokens;
    last_token_ = now;
  }
  StartRead(&response_);
}

void StreamReactor::OnDone(const grpc::Status& status) {
  record_.e2e = absl::Now() - start_;
  record_.ok = status.ok();
  if (!status.ok()) record_.error = status.error_message();
  Run* run = run_;
  RequestRecord record = std::move(record_);
  delete this;
  run->Finished(std::move(record));
}

// Follows Worker.StreamStatus and keeps the peak of used / total blocks.
class KvUsageMonitor {
 public:
  explicit KvUsageMonitor(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Worker::NewStub(channel)), thread_([this] { Loop(); }) {}
  ~KvUsageMonitor() {
    context_.TryCancel();
    thread_.join();
  }
  double peak_usage() const { return peak_.load(); }
  int64_t peak_used_blocks() const { return peak_used_.load(); }
  int64_t total_blocks() const { return total_.load(); }

 private:
  void Loop() {
    v1::StatusRequest request;
    request.set_router_id("kvserve-loadgen");
    auto reader = stub_->StreamStatus(&context_, request);
    v1::WorkerStatus status;
    while (reader->Read(&status)) {
      const v1::Capacity& capacity = status.capacity();
      if (capacity.total_blocks() <= 0) continue;
      total_.store(capacity.total_blocks());
      if (capacity.used_blocks() > peak_used_.load()) {
        peak_used_.store(capacity.used_blocks());
        peak_.store(static_cast<double>(capacity.used_blocks()) /
                    static_cast<double>(capacity.total_blocks()));
      }
    }
    reader->Finish();
  }

  std::unique_ptr<v1::Worker::Stub> stub_;
  grpc::ClientContext context_;
  std::atomic<double> peak_{0.0};
  std::atomic<int64_t> peak_used_{0};
  std::atomic<int64_t> total_{0};
  std::thread thread_;
};

std::vector<v1::GenerateRequest> MakeRequests(int32_t count, Range prompt_len, Range output_len,
                                              int32_t shared_prefix_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(absl::GetFlag(FLAGS_vocab_low),
                                               absl::GetFlag(FLAGS_vocab_high) - 1);
  std::uniform_int_distribution<int32_t> prompt_dist(prompt_len.min, prompt_len.max);
  std::uniform_int_distribution<int32_t> output_dist(output_len.min, output_len.max);
  std::vector<int32_t> prefix(shared_prefix_len);
  for (int32_t& id : prefix) id = token(rng);
  std::vector<v1::GenerateRequest> requests(count);
  for (int32_t i = 0; i < count; ++i) {
    v1::GenerateRequest& request = requests[i];
    request.set_request_id(absl::StrFormat("loadgen-%d", i));
    const int32_t length = std::max(prompt_dist(rng), shared_prefix_len + 1);
    auto* ids = request.mutable_prompt_token_ids()->mutable_ids();
    ids->Add(prefix.begin(), prefix.end());
    while (ids->size() < length) ids->Add(token(rng));
    request.mutable_sampling()->set_temperature(0.0f);
    request.mutable_sampling()->set_ignore_eos(true);
    request.mutable_sampling()->set_max_tokens(output_dist(rng));
  }
  return requests;
}

int Main() {
  Range prompt_len, output_len;
  if (!ParseRange(absl::GetFlag(FLAGS_prompt_len), &prompt_len) ||
      !ParseRange(absl::GetFlag(FLAGS_output_len), &output_len)) {
    std::fprintf(stderr, "--prompt_len and --output_len take min:max with 1 <= min <= max\n");
    return 1;
  }
  const int32_t concurrency = absl::GetFlag(FLAGS_concurrency);
  const int32_t shared_prefix = absl::GetFlag(FLAGS_shared_prefix_len);
  if (concurrency < 1 || shared_prefix < 0) {
    std::fprintf(stderr, "--concurrency must be >= 1 and --shared_prefix_len >= 0\n");
    return 1;
  }
  int32_t num_requests = absl::GetFlag(FLAGS_num_requests);
  if (num_requests <= 0) num_requests = 4 * concurrency;

  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(absl::GetFlag(FLAGS_target),
                                           grpc::InsecureChannelCredentials(), channel_args);
  if (!channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(30)))) {
    std::fprintf(stderr, "cannot connect to %s\n", absl::GetFlag(FLAGS_target).c_str());
    return 1;
  }
  auto stub = v1::Generation::NewStub(channel);
  std::unique_ptr<KvUsageMonitor> monitor;
  if (!absl::GetFlag(FLAGS_no_status)) monitor = std::make_unique<KvUsageMonitor>(channel);

  std::vector<v1::GenerateRequest> requests =
      MakeRequests(num_requests, prompt_len, output_len, shared_prefix, absl::GetFlag(FLAGS_seed));
  LoadSummary summary;
  for (const v1::GenerateRequest& request : requests) {
    summary.prompt_tokens += request.prompt_token_ids().ids_size();
  }
  Run run(stub.get(), std::move(requests), concurrency,
          absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  absl::Duration wall;
  const std::vector<RequestRecord> records = run.Execute(&wall);

  summary.concurrency = concurrency;
  summary.wall_s = absl::ToDoubleSeconds(wall);
  std::vector<double> ttft, itl, e2e;
  for (const RequestRecord& record : records) {
    if (!record.ok) {
      ++summary.failed;
      if (summary.first_error.empty()) summary.first_error = record.error;
      continue;
    }
    ++summary.succeeded;
    summary.output_tokens += record.output_tokens;
    ttft.push_back(absl::ToDoubleSeconds(record.ttft));
    e2e.push_back(absl::ToDoubleSeconds(record.e2e));
    itl.insert(itl.end(), record.inter_token_s.begin(), record.inter_token_s.end());
  }
  summary.ttft = Percentiles(ttft);
  summary.inter_token = Percentiles(itl);
  summary.e2e = Percentiles(e2e);
  if (monitor != nullptr) {
    summary.peak_kv_usage = monitor->peak_usage();
    summary.peak_kv_used_blocks = monitor->peak_used_blocks();
    summary.kv_total_blocks = monitor->total_blocks();
  }
  std::printf("%s\n%s\n", FormatSummary(summary).c_str(), SummaryJson(summary).c_str());
  return summary.failed == 0 ? 0 : 2;
}

}  // namespace
}  // namespace kvserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Load generator for kvserve (concurrent Generate streams).");
  absl::ParseCommandLine(argc, argv);
  return kvserve::Main();
}
