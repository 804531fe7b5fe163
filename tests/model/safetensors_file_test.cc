// SafetensorsFile: F32 / F16 / BF16 tensors read back from a written file; each kind of broken
// file rejected with an error naming the problem.
#include "model/safetensors_file.h"

#include <gtest/gtest.h>

#include "tests/model/safetensors_test_writer.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::SafetensorsTestWriter;
using ::kvserve::testing::StatusIs;
using ::kvserve::testing::TempDir;
using ::kvserve::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<float> Decode(const SafetensorsTensor& t) {
  std::vector<float> out(t.num_elements);
  KVSERVE_EXPECT_OK(Dequantize(t.type, t.data, t.num_bytes, t.num_elements, out.data()));
  return out;
}

TEST(SafetensorsFileTest, ReadsF32F16AndBF16Tensors) {
  SafetensorsTestWriter w;
  w.Add("a", "F32", {2, 3}, {1, 2, 3, 4, 5, 6.5f});
  w.Add("b", "F16", {3}, {0.5f, -1.25f, 100.0f});
  w.Add("c", "BF16", {2, 1}, {3.0f, -0.375f});
  w.header()["__metadata__"] = {{"format", "pt"}};
  TempDir dir("safetensors_test");
  WriteFile(dir.path() / "x.safetensors", w.Build());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open((dir.path() / "x.safetensors").string());
  KVSERVE_ASSERT_OK(file);
  EXPECT_EQ((*file)->tensors().size(), 3u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const SafetensorsTensor* a = (*file)->FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->dtype, "F32");
  EXPECT_EQ(Decode(*a), (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));
  EXPECT_EQ(Decode(*(*file)->FindTensor("b")), (std::vector<float>{0.5f, -1.25f, 100.0f}));
  const SafetensorsTensor* c = (*file)->FindTensor("c");
  EXPECT_EQ(c->type, GgmlType::kBF16);
  EXPECT_EQ(Decode(*c), (std::vector<float>{3.0f, -0.375f}));
  EXPECT_EQ((*file)->FindTensor("d"), nullptr);
}

void ExpectRejected(const std::string& bytes, std::string_view text) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Parse(bytes, "t.st");
  ASSERT_FALSE(file.ok()) << "expected an error mentioning " << text;
  EXPECT_THAT(file, StatusIs(absl::StatusCode::kInvalidArgument,
                             AllOf(HasSubstr(text), HasSubstr("t.st: "))));
}

TEST(SafetensorsFileTest, RejectsTruncatedAndAbsurdHeaders) {
  ExpectRejected("abc", "truncated");
  std::string huge(8, '\0');
  const uint64_t length = 1ull << 40;
  std::memcpy(huge.data(), &length, 8);
  ExpectRejected(huge + "{}", "header length 1099511627776");
  SafetensorsTestWriter w;
  w.Add("a", "F32", {4}, {1, 2, 3, 4});
  const std::string good = w.Build();
  // Cut inside the JSON header: its length now exceeds the file.
  ExpectRejected(good.substr(0, 20), "exceeds the file");
  std::string not_json = good;
  not_json[8] = '[';
  ExpectRejected(not_json, "not a JSON object");
  // Every prefix fails cleanly (cut inside the data: the offsets no longer fit).
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(SafetensorsFile::Parse(good.substr(0, n), "p").ok()) << n;
  }
}

TEST(SafetensorsFileTest, RejectsBadEntries) {
  {
    SafetensorsTestWriter w;
    w.AddRaw("x", "Q9", {2}, "ab");
    ExpectRejected(w.Build(), "tensor 'x': unknown dtype 'Q9'");
  }
  {
    SafetensorsTestWriter w;
    w.AddRaw("ids", "I64", {1}, std::string(8, '\0'));
    ExpectRejected(w.Build(), "tensor 'ids': unsupported dtype I64");
  }
  {
    SafetensorsTestWriter w;
    w.Add("a", "F32", {2}, {1, 2});
    w.header()["a"]["data_offsets"] = {0, 4096};
    ExpectRejected(w.Build(), "tensor 'a': data_offsets [0, 4096) lie outside");
  }
  {
    SafetensorsTestWriter w;
    w.Add("a", "F32", {2}, {1, 2});
    w.header()["a"]["shape"] = {3};
    ExpectRejected(w.Build(), "tensor 'a': data_offsets span 8 bytes, the shape needs 12");
  }
  {
    SafetensorsTestWriter w;
    w.Add("a", "F32", {2}, {1, 2});
    w.header()["a"]["shape"] = {1ull << 40, 1ull << 40};
    ExpectRejected(w.Build(), "tensor 'a': shape overflows");
  }
  {
    SafetensorsTestWriter w;
    w.Add("a", "F32", {2}, {1, 2});
    w.header()["a"]["shape"] = {-2};
    ExpectRejected(w.Build(), "tensor 'a': shape has a non-integer or negative entry");
  }
  {
    SafetensorsTestWriter w;
    w.Add("a", "F32", {2}, {1, 2});
    w.header()["a"].erase("dtype");
    ExpectRejected(w.Build(), "tensor 'a': want");
  }
}

TEST(SafetensorsFileTest, MissingFileIsNotFound) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_THAT(file,
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/model.safetensors")));
}

}  // namespace
}  // namespace kvserve
