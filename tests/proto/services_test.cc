// The shape of the kvserve.v1 API as the generated descriptor pool sees it: services, methods,
// streaming kinds, request / response types, and every field's number, type and presence
// compared with tests/proto/testdata/kvserve_v1_api.txt. A change that would break clients
// (renumbering, retyping, dropping presence) fails here; an intended change updates the file
// with KVSERVE_UPDATE_API_GOLDEN=1 and shows up in review as a diff.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/router_admin.grpc.pb.h"
#include "kvserve/v1/worker.grpc.pb.h"

namespace kvserve::v1 {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::MethodDescriptor;
using google::protobuf::ServiceDescriptor;

constexpr char kGoldenPath[] = KVSERVE_SOURCE_DIR "/tests/proto/testdata/kvserve_v1_api.txt";

// kvserve_proto is a static library: a generated file's descriptor reaches the generated pool
// only if the binary links that file's object. Touching one message of each file does so (a
// server gets the same effect from the service code it uses).
class ApiLinked : public ::testing::Environment {
 public:
  void SetUp() override {
    for (const Descriptor* message :
         {SamplingParams::descriptor(), GenerateResponse::descriptor(),
          GenerateRequest::descriptor(), KvEvent::descriptor(), WorkerStatus::descriptor(),
          ListWorkersRequest::descriptor()}) {
      ASSERT_NE(message->file(), nullptr);
    }
  }
};
[[maybe_unused]] const ::testing::Environment* const kApiLinked =
    ::testing::AddGlobalTestEnvironment(new ApiLinked);

struct MethodShape {
  const char* name;
  const char* input;
  const char* output;
  bool server_streaming;
};

void ExpectService(const char* service_name, const std::vector<MethodShape>& methods) {
  const ServiceDescriptor* service =
      DescriptorPool::generated_pool()->FindServiceByName(service_name);
  ASSERT_NE(service, nullptr) << service_name;
  EXPECT_EQ(service->method_count(), static_cast<int>(methods.size())) << service_name;
  for (const MethodShape& shape : methods) {
    const MethodDescriptor* method = service->FindMethodByName(shape.name);
    ASSERT_NE(method, nullptr) << service_name << "." << shape.name;
    EXPECT_EQ(method->input_type()->full_name(), shape.input) << shape.name;
    EXPECT_EQ(method->output_type()->full_name(), shape.output) << shape.name;
    EXPECT_FALSE(method->client_streaming()) << shape.name;
    EXPECT_EQ(method->server_streaming(), shape.server_streaming) << shape.name;
  }
}

TEST(ServicesTest, GenerationHasTheDocumentedMethods) {
  ExpectService(
      "kvserve.v1.Generation",
      {{"Generate", "kvserve.v1.GenerateRequest", "kvserve.v1.GenerateResponse", true},
       {"Tokenize", "kvserve.v1.TokenizeRequest", "kvserve.v1.TokenizeResponse", false},
       {"Detokenize", "kvserve.v1.DetokenizeRequest", "kvserve.v1.DetokenizeResponse", false},
       {"GetModelInfo", "kvserve.v1.GetModelInfoRequest", "kvserve.v1.ModelInfo", false}});
}

TEST(ServicesTest, WorkerHasTheDocumentedMethods) {
  ExpectService(
      "kvserve.v1.Worker",
      {{"Generate", "kvserve.v1.WorkerGenerateRequest", "kvserve.v1.GenerateResponse", true},
       {"StreamStatus", "kvserve.v1.StatusRequest", "kvserve.v1.WorkerStatus", true},
       {"GetModelInfo", "kvserve.v1.GetModelInfoRequest", "kvserve.v1.ModelInfo", false},
       {"FetchKvBlocks", "kvserve.v1.FetchKvBlocksRequest", "kvserve.v1.KvBlockData", true}});
}

TEST(ServicesTest, RouterAdminHasTheDocumentedMethods) {
  ExpectService("kvserve.v1.RouterAdmin", {{"ListWorkers", "kvserve.v1.ListWorkersRequest",
                                            "kvserve.v1.ListWorkersResponse", false}});
}

TEST(ServicesTest, GeneratedStubsNameTheSameServices) {
  EXPECT_STREQ(Generation::service_full_name(), "kvserve.v1.Generation");
  EXPECT_STREQ(Worker::service_full_name(), "kvserve.v1.Worker");
  EXPECT_STREQ(RouterAdmin::service_full_name(), "kvserve.v1.RouterAdmin");
}

TEST(ServicesTest, PublicRequestHasNoCacheSalt) {
  // The salt comes from the authenticated tenant; a request field would let clients choose it.
  for (const char* name : {"kvserve.v1.GenerateRequest", "kvserve.v1.SamplingParams"}) {
    const Descriptor* message = DescriptorPool::generated_pool()->FindMessageTypeByName(name);
    ASSERT_NE(message, nullptr);
    for (int i = 0; i < message->field_count(); ++i) {
      EXPECT_EQ(message->field(i)->name().find("salt"), std::string::npos)
          << name << "." << message->field(i)->name();
    }
  }
  const Descriptor* worker_request =
      DescriptorPool::generated_pool()->FindMessageTypeByName("kvserve.v1.WorkerGenerateRequest");
  ASSERT_NE(worker_request, nullptr);
  EXPECT_NE(worker_request->FindFieldByName("cache_salt"), nullptr);
}

// One line per field, enum value and method, in declaration order.
std::string DescribeField(const FieldDescriptor* field) {
  std::ostringstream line;
  line << "  " << field->number() << " " << field->name() << " ";
  if (field->is_repeated()) {
    line << "repeated ";
  } else if (field->has_optional_keyword()) {
    line << "optional ";
  }
  if (field->message_type() != nullptr) {
    line << field->message_type()->full_name();
  } else if (field->enum_type() != nullptr) {
    line << field->enum_type()->full_name();
  } else {
    line << field->type_name();
  }
  if (field->real_containing_oneof() != nullptr) {
    line << " oneof " << field->real_containing_oneof()->name();
  }
  return line.str();
}

void DescribeMessage(const Descriptor* message, std::ostringstream& out) {
  out << "message " << message->full_name() << "\n";
  for (int i = 0; i < message->field_count(); ++i) out << DescribeField(message->field(i)) << "\n";
  for (int i = 0; i < message->nested_type_count(); ++i) {
    DescribeMessage(message->nested_type(i), out);
  }
}

void DescribeEnum(const EnumDescriptor* enum_type, std::ostringstream& out) {
  out << "enum " << enum_type->full_name() << "\n";
  for (int i = 0; i < enum_type->value_count(); ++i) {
    out << "  " << enum_type->value(i)->number() << " " << enum_type->value(i)->name() << "\n";
  }
}

std::string DescribeApi() {
  std::ostringstream out;
  for (const char* file_name :
       {"kvserve/v1/sampling.proto", "kvserve/v1/output.proto", "kvserve/v1/generation.proto",
        "kvserve/v1/kv_events.proto", "kvserve/v1/worker.proto", "kvserve/v1/router_admin.proto"}) {
    const FileDescriptor* file = DescriptorPool::generated_pool()->FindFileByName(file_name);
    if (file == nullptr) return std::string("missing file ") + file_name + "\n";
    out << "file " << file->name() << " package " << file->package() << "\n";
    for (int i = 0; i < file->enum_type_count(); ++i) DescribeEnum(file->enum_type(i), out);
    for (int i = 0; i < file->message_type_count(); ++i)
      DescribeMessage(file->message_type(i), out);
    for (int i = 0; i < file->service_count(); ++i) {
      const ServiceDescriptor* service = file->service(i);
      out << "service " << service->full_name() << "\n";
      for (int m = 0; m < service->method_count(); ++m) {
        const MethodDescriptor* method = service->method(m);
        out << "  rpc " << method->name() << " " << method->input_type()->full_name() << " -> "
            << (method->server_streaming() ? "stream " : "") << method->output_type()->full_name()
            << "\n";
      }
    }
  }
  return out.str();
}

TEST(ApiShapeTest, MatchesTheReviewedGoldenDescription) {
  const std::string actual = DescribeApi();
  const char* update = std::getenv("KVSERVE_UPDATE_API_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(kGoldenPath) << actual;
    GTEST_SKIP() << "rewrote " << kGoldenPath;
  }
  std::ifstream golden_file(kGoldenPath);
  ASSERT_TRUE(golden_file.good()) << "cannot read " << kGoldenPath;
  std::stringstream golden;
  golden << golden_file.rdbuf();
  if (actual == golden.str()) return;
  // Report the first differing line rather than two pages of text.
  std::istringstream actual_lines(actual);
  std::string actual_line;
  std::string golden_line;
  int line_number = 1;
  while (true) {
    const bool has_actual = static_cast<bool>(std::getline(actual_lines, actual_line));
    const bool has_golden = static_cast<bool>(std::getline(golden, golden_line));
    if (!has_actual) actual_line = "<end>";
    if (!has_golden) golden_line = "<end>";
    if (actual_line != golden_line || (!has_actual && !has_golden)) break;
    ++line_number;
  }
  ADD_FAILURE() << "The kvserve.v1 API changed shape at line " << line_number << " of "
                << kGoldenPath << "\n  golden: " << golden_line << "\n  actual: " << actual_line
                << "\nIf that is intended and wire-compatible, rerun with "
                   "KVSERVE_UPDATE_API_GOLDEN=1 and review the diff.";
}

}  // namespace
}  // namespace kvserve::v1
