// WorkerOptions::Validate names the flag of every bad value (and reads the --chat_template
// file); TLS files are read at start-up.
#include "worker/worker_options.h"

#include <cmath>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::StatusIs;
using ::testing::StartsWith;

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& field) {
  EXPECT_THAT(status, StatusIs(code, StartsWith(field + ": ")));
}

TEST(WorkerOptions, DefaultsAreValidAndEveryBadFlagIsNamed) {
  EXPECT_FALSE(WorkerOptions().Validate().ok());  // no model
  WorkerOptions good;
  good.model = "synthetic:tiny";
  KVSERVE_ASSERT_OK(good.Validate());
  struct Case {
    void (*set)(WorkerOptions*);
    const char* flag;
  };
  const Case cases[] = {
      {[](WorkerOptions* o) { o->block_size = 12; }, "--block_size"},
      {[](WorkerOptions* o) { o->kv_memory_bytes = -1; }, "--kv_memory_bytes"},
      {[](WorkerOptions* o) { o->max_num_seqs = 0; }, "--max_num_seqs"},
      {[](WorkerOptions* o) { o->max_num_batched_tokens = 8; }, "--max_num_batched_tokens"},
      {[](WorkerOptions* o) { o->listen = "nohostport"; }, "--listen"},
      {[](WorkerOptions* o) { o->listen = "127.0.0.1:70000"; }, "--listen"},
      {[](WorkerOptions* o) { o->metrics_listen = "127.0.0.1:x"; }, "--metrics_listen"},
      {[](WorkerOptions* o) { o->tls_cert = "cert.pem"; }, "--tls_key"},
      {[](WorkerOptions* o) { o->tls_ca = "ca.pem"; }, "--tls_ca"},
      {[](WorkerOptions* o) { o->drain_timeout_s = -1; }, "--drain_timeout_s"},
      {[](WorkerOptions* o) { o->drain_kv_handoff_s = -1; }, "--drain_kv_handoff_s"},
      {[](WorkerOptions* o) { o->kv_fetch_timeout_s = std::nan(""); }, "--kv_fetch_timeout_s"},
      {[](WorkerOptions* o) { o->preemption_mode = "evict"; }, "--preemption_mode"},
      {[](WorkerOptions* o) { o->preemption_mode = "swap"; }, "--preemption_mode"},
      {[](WorkerOptions* o) { o->structured_output_timeout_s = 0; },
       "--structured_output_timeout_s"},
      {[](WorkerOptions* o) { o->worker_id = std::string(200, 'w'); }, "--worker_id"},
      {[](WorkerOptions* o) { o->served_model_name = "Smollm2 135M"; }, "--served_model_name"},
      {[](WorkerOptions* o) { o->served_model_name = std::string(300, 'm'); },
       "--served_model_name"},
  };
  for (const Case& c : cases) {
    WorkerOptions options = good;
    c.set(&options);
    ExpectError(options.Validate(), absl::StatusCode::kInvalidArgument, c.flag);
  }
}

TEST(WorkerOptions, UnreadableTlsFileIsNamed) {
  WorkerOptions options;
  options.model = "synthetic:tiny";
  options.tls_cert = "/nonexistent/cert.pem";
  options.tls_key = "/nonexistent/key.pem";
  KVSERVE_ASSERT_OK(options.Validate());
  ExpectError(LoadTlsFiles(options).status(), absl::StatusCode::kInvalidArgument, "--tls_cert");
}

TEST(WorkerOptions, ChatTemplateFileMustBeReadableAndParse) {
  WorkerOptions options;
  options.model = "synthetic:tiny";
  options.chat_template = "/nonexistent/template.jinja";
  EXPECT_THAT(options.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                           StartsWith("--chat_template: cannot read")));
  options.chat_template = ::testing::TempDir() + "/unterminated.jinja";
  std::ofstream(options.chat_template) << "{% if messages %}";
  EXPECT_THAT(options.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                           StartsWith("--chat_template: '" + options.chat_template +
                                                      "': chat template does not parse")));
  std::ofstream(options.chat_template) << "{% if messages %}x{% endif %}";
  KVSERVE_EXPECT_OK(options.Validate());
}

TEST(WorkerOptions, StepTimeModelReadsItsFieldsAndIgnoresOthers) {
  absl::StatusOr<StepTimeModel> model = ParseStepTimeModel(
      R"({"fixed_ms": 3.5, "prefill_token_ms": 0.25, "decode_token_ms": 1,
          "prefill_attention_ms_per_mtoken": 40, "decode_attention_ms_per_mtoken": 500,
          "source": "fit of 1200 steps"})");
  KVSERVE_ASSERT_OK(model);
  EXPECT_EQ(model->fixed_ms, 3.5);
  EXPECT_EQ(model->prefill_token_ms, 0.25);
  EXPECT_EQ(model->decode_token_ms, 1);
  EXPECT_EQ(model->prefill_attention_ms_per_mtoken, 40);
  EXPECT_EQ(model->decode_attention_ms_per_mtoken, 500);
  // 3.5 + 0.25 * 100 + 1 * 8 + 40 * 2e6 / 1e6 + 500 * 16000 / 1e6 = 124.5 ms
  EXPECT_EQ(model->Of(100, 8, 2'000'000, 16'000), absl::Microseconds(124500));
  absl::StatusOr<StepTimeModel> partial = ParseStepTimeModel(R"({"decode_token_ms": 2})");
  KVSERVE_ASSERT_OK(partial);
  EXPECT_EQ(partial->Of(10, 3, 1000, 1000), absl::Milliseconds(6));
}

TEST(WorkerOptions, BadStepTimeModelIsNamed) {
  for (const char* text : {"[1, 2]", "{not json", R"({"fixed_ms": -1})",
                           R"({"decode_token_ms": "fast"})", R"({"source": "only"})"}) {
    SCOPED_TRACE(text);
    ExpectError(ParseStepTimeModel(text).status(), absl::StatusCode::kInvalidArgument,
                "--step_time_model");
  }
  EXPECT_THAT(ParseStepTimeModel(R"({"fixed_ms": -1})").status().message(),
              ::testing::HasSubstr("fixed_ms"));
}

}  // namespace
}  // namespace kvserve
