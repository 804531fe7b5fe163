// The router's stall rule for a request stream (router/worker_connection.h): a worker stream
// with no message for --stream_progress_timeout_s is taken as lost and the request moves, but a
// progress report (worker.proto progress_interval_ms) is a message: a long prefill that reports
// is not a stall, and the report never reaches the client. A request that stalls on every
// worker ends UNAVAILABLE and counts as workers_failed, not no_worker.
//
// The router's real parts (WorkerRegistry, WorkerConnection, ClusterBooks, AdmissionQueue,
// GenerateProxy / GenerateCall) against one scripted Worker server on loopback, whose Generate
// call is silent for a set time, with or without the reports the router asked for, then answers.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvserve/v1/worker.grpc.pb.h"
#include "prometheus/metric_family.h"
#include "router/admission_queue.h"
#include "router/cluster_books.h"
#include "router/generate_call.h"
#include "router/generate_proxy.h"
#include "router/router_metrics.h"
#include "router/worker_registry.h"
#include "tests/router/router_test_util.h"

namespace kvserve {
namespace {

namespace v1 = kvserve::v1;

constexpr absl::Duration kProgressTimeout = absl::Seconds(1);

// A worker whose Generate is silent for `silence` (sending a progress report every
// progress_interval_ms the router asked for when `report`), then sends three tokens with usage.
class ScriptedWorker final : public v1::Worker::Service {
 public:
  absl::Duration silence;
  bool report = true;
  bool early_token = false;  // one token before the silence (then the last message has two)
  std::atomic<int> calls{0};
  std::atomic<int> asked_interval_ms{-1};
  std::atomic<bool> stopping{false};

  grpc::Status GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest*,
                            v1::ModelInfo* info) override {
    info->set_name("scripted");
    info->set_kv_block_size(16);
    return grpc::Status::OK;
  }

  grpc::Status StreamStatus(grpc::ServerContext* context, const v1::StatusRequest*,
                            grpc::ServerWriter<v1::WorkerStatus>* writer) override {
    v1::WorkerStatus status = testing_util::MakeStatus(7, {.total = 1000, .free = 1000});
    testing_util::SetSnapshotPart(&status, 0, 0, true, {});
    if (!writer->Write(status)) return grpc::Status::OK;
    while (!context->IsCancelled() && !stopping) {
      absl::SleepFor(absl::Milliseconds(50));
      if (!writer->Write(testing_util::MakeStatus(7, {.total = 1000, .free = 1000}))) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status Generate(grpc::ServerContext* context, const v1::WorkerGenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    ++calls;
    asked_interval_ms = request->progress_interval_ms();
    const absl::Duration interval = absl::Milliseconds(request->progress_interval_ms());
    if (early_token) {
      v1::GenerateResponse first;
      first.set_request_id(request->request_id());
      first.add_choices()->add_token_ids(4);
      writer->Write(first);
    }
    const absl::Time end = absl::Now() + silence;
    absl::Time next_report = absl::Now() + interval;
    while (absl::Now() < end) {
      if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      if (report && interval > absl::ZeroDuration() && absl::Now() >= next_report) {
        v1::GenerateResponse progress;
        progress.set_request_id(request->request_id());
        progress.mutable_prefill_progress()->set_computed_tokens(1);
        writer->Write(progress);
        next_report += interval;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    v1::GenerateResponse last;
    last.set_request_id(request->request_id());
    v1::ChoiceDelta* delta = last.add_choices();
    if (!early_token) delta->add_token_ids(4);
    delta->add_token_ids(5);
    delta->add_token_ids(6);
    delta->set_text(early_token ? "bc" : "abc");
    delta->set_finish_reason(v1::FINISH_REASON_LENGTH);
    last.mutable_usage()->set_prompt_tokens(request->prompt_token_ids_size());
    last.mutable_usage()->set_completion_tokens(3);
    writer->Write(last);
    return grpc::Status::OK;
  }
};

// The client side of one GenerateCall: records what it is sent and how it ends.
class RecordingClient final : public GenerateClient {
 public:
  std::unique_ptr<grpc::ClientContext> NewWorkerContext() override {
    return std::make_unique<grpc::ClientContext>();
  }
  ~RecordingClient() {
    for (std::thread& writer : slow_writes_) writer.join();
  }
  void Send(const v1::GenerateResponse& message) override {
    {
      absl::MutexLock lock(&mu_);
      messages_.push_back(message);
    }
    if (write_time == absl::ZeroDuration()) {
      call->OnWriteDone(true);
      return;
    }
    slow_writes_.emplace_back([this] {  // a client that takes its time to read
      absl::SleepFor(write_time);
      call->OnWriteDone(true);
    });
  }
  void End(const absl::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      status_ = status;
    }
    ended_.Notify();
    call->OnClientDone();
  }

  bool WaitEnd(absl::Duration timeout) { return ended_.WaitForNotificationWithTimeout(timeout); }
  std::vector<v1::GenerateResponse> messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

  GenerateCall* call = nullptr;
  absl::Duration write_time;  // how long each message takes to reach the client

 private:
  std::vector<std::thread> slow_writes_;
  absl::Mutex mu_;
  std::vector<v1::GenerateResponse> messages_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::Notification ended_;
};

double Counter(const RouterMetrics& metrics, const std::string& name, const std::string& label,
               const std::string& value) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      if (label.empty() && metric.label.empty()) return metric.counter.value;
      for (const prometheus::ClientMetric::Label& pair : metric.label) {
        if (pair.name == label && pair.value == value) return metric.counter.value;
      }
    }
  }
  return 0;
}

class StreamStallTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&worker_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    address_ = "127.0.0.1:" + std::to_string(port);

    absl::StatusOr<std::unique_ptr<ClusterBooks>> books = ClusterBooks::Create({});
    ASSERT_TRUE(books.ok()) << books.status();
    books_ = *std::move(books);
    queue_ = std::make_unique<AdmissionQueue>(books_.get(), AdmissionOptions{});
    WorkerConnectionOptions connection;
    connection.router_id = "stall-test";
    connection.stream_progress_timeout = kProgressTimeout;
    registry_ = std::make_unique<WorkerRegistry>(books_.get(), grpc::InsecureChannelCredentials(),
                                                 connection);
    registry_->SetAddresses({address_});
    proxy_ = std::make_unique<GenerateProxy>(registry_.get(), books_.get(), queue_.get(), &metrics_,
                                             /*max_migrations=*/3);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!Healthy() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(Healthy()) << "the router never saw the scripted worker";
  }

  void TearDown() override {
    worker_.stopping = true;
    if (proxy_ != nullptr) proxy_->WaitIdle(absl::Now() + absl::Seconds(30));
    if (registry_ != nullptr) registry_->Stop();
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
  }

  bool Healthy() const {
    for (const WorkerSummary& worker : books_->Workers()) {
      if (worker.health == WorkerHealth::kHealthy) return true;
    }
    return false;
  }

  // Runs one request through the proxy; the client is done with it on return.
  void Run(RecordingClient* client) {
    ProxiedRequest request;
    request.client_request_id = "client-1";
    request.router_request_id = "stall-test-r1";
    request.prompt_token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
    request.sampling.set_max_tokens(3);
    request.sampling.set_seed(1);
    request.context_length = 1024;
    client->call = GenerateCall::Create(proxy_.get(), client, std::move(request),
                                        absl::Now() + absl::Seconds(60));
    client->call->Begin();
    ASSERT_TRUE(client->WaitEnd(absl::Seconds(60)));
    ASSERT_TRUE(proxy_->WaitIdle(absl::Now() + absl::Seconds(10)));
  }

  ScriptedWorker worker_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  RouterMetrics metrics_;
  std::unique_ptr<ClusterBooks> books_;
  std::unique_ptr<AdmissionQueue> queue_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<GenerateProxy> proxy_;
};

TEST_F(StreamStallTest, ProgressReportsKeepASilentPrefillFromBeingTakenForAStall) {
  worker_.silence = 3 * kProgressTimeout;
  worker_.report = true;
  RecordingClient client;
  Run(&client);
  EXPECT_TRUE(client.status().ok()) << client.status();
  EXPECT_EQ(worker_.asked_interval_ms, absl::ToInt64Milliseconds(kProgressTimeout / 4));
  EXPECT_EQ(worker_.calls, 1) << "the request moved although its worker reported progress";
  EXPECT_EQ(Counter(metrics_, "kvserve_router_migrations_total", "", ""), 0);
  // The client gets the output only: no report, no empty message.
  const std::vector<v1::GenerateResponse> messages = client.messages();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_FALSE(messages[0].has_prefill_progress());
  ASSERT_EQ(messages[0].choices_size(), 1);
  EXPECT_EQ(messages[0].choices(0).token_ids_size(), 3);
  EXPECT_EQ(messages[0].request_id(), "client-1");
  EXPECT_EQ(messages[0].usage().completion_tokens(), 3);
}

TEST_F(StreamStallTest, ASilentStreamStillMovesAndFailingEveryWorkerIsNotNoWorker) {
  worker_.silence = 4 * kProgressTimeout;
  worker_.report = false;  // a hung engine: no message at all
  RecordingClient client;
  const absl::Time start = absl::Now();
  Run(&client);
  EXPECT_LT(absl::Now() - start, 3 * kProgressTimeout) << "the stall was not detected in time";
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable) << client.status();
  EXPECT_NE(client.status().message().find("stopped answering"), std::string::npos)
      << client.status();
  EXPECT_EQ(Counter(metrics_, "kvserve_router_migrations_total", "", ""), 1);
  EXPECT_EQ(Counter(metrics_, "kvserve_router_requests_rejected_total", "reason", "workers_failed"),
            1);
  EXPECT_EQ(Counter(metrics_, "kvserve_router_requests_rejected_total", "reason", "no_worker"), 0);
}

TEST_F(StreamStallTest, AClientSlowerThanTheTimeoutDoesNotMoveAHealthyWorkersRequest) {
  // The worker sends a token, then its last message after a short silence with reports; the
  // client takes 2.5 timeouts to take each message, during which no read is pending.
  worker_.silence = kProgressTimeout / 2;
  worker_.report = true;
  worker_.early_token = true;
  RecordingClient client;
  client.write_time = 2.5 * kProgressTimeout;
  Run(&client);
  EXPECT_TRUE(client.status().ok()) << client.status();
  EXPECT_EQ(worker_.calls, 1) << "a slow client's request moved off a healthy worker";
  EXPECT_EQ(Counter(metrics_, "kvserve_router_migrations_total", "", ""), 0);
  const std::vector<v1::GenerateResponse> messages = client.messages();
  ASSERT_EQ(messages.size(), 2u);
  EXPECT_EQ(messages[1].usage().completion_tokens(), 3);
}

}  // namespace
}  // namespace kvserve
