// GgufFile: metadata of every type, the tensor table, and a malformed file of each kind
// rejected with a clear error (never a crash).
#include "model/gguf_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "model/default_model.h"
#include "tests/model/gguf_test_writer.h"
#include "tests/status_matchers.h"

namespace kvserve {
namespace {

using ::kvserve::testing::GgufTestWriter;
using ::kvserve::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::_;

// One key of each scalar type, arrays of int32 / float32 / string, a nested array, two tensors.
std::string AllTypesFile(uint32_t version) {
  GgufTestWriter w(version);
  std::string v;
  v.push_back(static_cast<char>(200));
  w.Raw("u8", GgufValueType::kUint8, v);
  w.Raw("i8", GgufValueType::kInt8, std::string(1, static_cast<char>(-5)));
  v.clear();
  GgufTestWriter::Put<uint16_t>(&v, 60000);
  w.Raw("u16", GgufValueType::kUint16, v);
  v.clear();
  GgufTestWriter::Put<int16_t>(&v, -30000);
  w.Raw("i16", GgufValueType::kInt16, v);
  w.AddU32("u32", 4000000000u);
  v.clear();
  GgufTestWriter::Put<int32_t>(&v, -7);
  w.Raw("i32", GgufValueType::kInt32, v);
  v.clear();
  GgufTestWriter::Put<uint64_t>(&v, 1ull << 40);
  w.Raw("u64", GgufValueType::kUint64, v);
  w.AddI64("i64", -(1ll << 50));
  w.AddF32("f32", 1.5f);
  v.clear();
  GgufTestWriter::Put<double>(&v, -2.25);
  w.Raw("f64", GgufValueType::kFloat64, v);
  w.AddBool("flag", true);
  w.AddString("general.name", "tiny test");
  w.AddI32Array("ints", {3, -1, 7});
  w.AddF32Array("floats", {0.5f, -1.0f});
  w.AddStringArray("words", {"a", "", "héllo"});
  // array[array[uint8]] with inner arrays {1, 2} and {}: inner arrays carry no type tag.
  v.clear();
  GgufTestWriter::Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kArray));
  GgufTestWriter::Put<uint64_t>(&v, 2);
  GgufTestWriter::Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kUint8));
  GgufTestWriter::Put<uint64_t>(&v, 2);
  v += std::string("\x01\x02", 2);
  GgufTestWriter::Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kUint8));
  GgufTestWriter::Put<uint64_t>(&v, 0);
  w.Raw("nested", GgufValueType::kArray, v);
  w.AddF32Tensor("a", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  w.AddF16Tensor("b", {3}, {0.5f, -2.0f, 1024.0f});
  return w.Build();
}

TEST(GgufFileTest, ReadsEveryMetadataTypeInVersions2And3) {
  for (uint32_t version : {2u, 3u}) {
    const std::string bytes = AllTypesFile(version);
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(bytes);
    KVSERVE_ASSERT_OK(file);
    const GgufFile& f = **file;
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(*f.GetInt("u8"), 200);
    EXPECT_EQ(*f.GetInt("i8"), -5);
    EXPECT_EQ(*f.GetInt("u16"), 60000);
    EXPECT_EQ(*f.GetInt("i16"), -30000);
    EXPECT_EQ(*f.GetInt("u32"), 4000000000ll);
    EXPECT_EQ(*f.GetInt("i32"), -7);
    EXPECT_EQ(*f.GetInt("u64"), 1ll << 40);
    EXPECT_EQ(*f.GetInt("i64"), -(1ll << 50));
    EXPECT_EQ(*f.GetFloat("f32"), 1.5);
    EXPECT_EQ(*f.GetFloat("f64"), -2.25);
    EXPECT_TRUE(*f.GetBool("flag"));
    EXPECT_EQ(*f.GetString("general.name"), "tiny test");
    EXPECT_EQ(*f.GetIntArray("ints"), (std::vector<int64_t>{3, -1, 7}));
    EXPECT_EQ(*f.GetFloatArray("floats"), (std::vector<double>{0.5, -1.0}));
    EXPECT_EQ(*f.GetStringArray("words"), (std::vector<std::string>{"a", "", "héllo"}));
    EXPECT_EQ(*f.GetArrayLength("words"), 3);
    const GgufValue* nested = f.FindValue("nested");
    ASSERT_NE(nested, nullptr);
    ASSERT_EQ(nested->array.size(), 2u);
    EXPECT_EQ(nested->array[0].array_length, 2u);
    EXPECT_EQ(nested->array[0].scalar_elements[1], 2);
    EXPECT_EQ(nested->array[1].array_length, 0u);
    EXPECT_EQ(f.keys().size(), 16u);
    EXPECT_EQ(f.keys().front(), "u8");
  }
}

TEST(GgufFileTest, TensorTablePointsIntoTheAlignedDataSection) {
  const std::string bytes = AllTypesFile(3);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(bytes);
  KVSERVE_ASSERT_OK(file);
  ASSERT_EQ((*file)->tensors().size(), 2u);
  const GgufTensorInfo* a = (*file)->FindTensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, GgmlType::kF32);
  EXPECT_EQ(a->dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(a->num_elements(), 8);
  EXPECT_EQ(a->num_bytes, 32u);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ((a->data - reinterpret_cast<const uint8_t*>(bytes.data())) % 32, 0);
  float third;
  std::memcpy(&third, a->data + 8, 4);
  EXPECT_EQ(third, 3.0f);
  const GgufTensorInfo* b = (*file)->FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, 32u);
  EXPECT_EQ(b->num_bytes, 6u);
  EXPECT_EQ((*file)->FindTensor("c"), nullptr);
}

TEST(GgufFileTest, HonoursGeneralAlignment) {
  GgufTestWriter w(3, 64);
  w.AddU32("general.alignment", 64);
  w.AddF32Tensor("x", {3}, {1, 2, 3});
  w.AddF32Tensor("y", {1}, {9});
  const std::string bytes = w.Build();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(bytes);
  KVSERVE_ASSERT_OK(file);
  EXPECT_EQ((*file)->alignment(), 64u);
  EXPECT_EQ((*file)->FindTensor("y")->offset, 64u);
  EXPECT_EQ((*file)->FindTensor("y")->data[0], bytes[bytes.size() - 4]);
}

TEST(GgufFileTest, MissingKeyIsNotFoundAndWrongTypeNamesBothTypes) {
  const std::string bytes = AllTypesFile(3);
  std::unique_ptr<GgufFile> file = *GgufFile::Parse(bytes);
  absl::StatusOr<int64_t> missing = file->GetInt("llama.block_count");
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound, HasSubstr("llama.block_count")));
  absl::StatusOr<std::string> wrong = file->GetString("u32");
  EXPECT_THAT(wrong, StatusIs(absl::StatusCode::kInvalidArgument,
                              HasSubstr("'u32' has type uint32, want string")));
  absl::StatusOr<std::vector<std::string>> wrong_array = file->GetStringArray("ints");
  EXPECT_THAT(wrong_array, StatusIs(_, HasSubstr("array[int32]")));
  EXPECT_THAT(file->GetFloat("i32"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(file->GetBool("u8"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(file->GetIntArray("floats"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(file->Has("nope"));
  EXPECT_TRUE(file->Has("nested"));
}

TEST(GgufFileTest, EveryTruncationIsAnErrorNotACrash) {
  const std::string bytes = AllTypesFile(3);
  for (size_t n = 0; n < bytes.size(); ++n) {
    absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(bytes.substr(0, n));
    EXPECT_FALSE(file.ok()) << "prefix of " << n << " bytes parsed";
  }
}

// Expects Parse(bytes) to fail with INVALID_ARGUMENT mentioning `text`.
void ExpectRejected(const std::string& bytes, std::string_view text) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Parse(bytes);
  ASSERT_FALSE(file.ok()) << "expected an error mentioning " << text;
  EXPECT_THAT(file, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(text)));
}

TEST(GgufFileTest, RejectsBadMagicAndVersions) {
  std::string bytes = AllTypesFile(3);
  bytes[0] = 'X';
  ExpectRejected(bytes, "not a GGUF file");
  ExpectRejected(GgufTestWriter(1).Build(), "unsupported GGUF version 1");
  ExpectRejected(GgufTestWriter(4).Build(), "unsupported GGUF version 4");
}

TEST(GgufFileTest, RejectsAbsurdCountsAndLengthsWithoutAllocating) {
  std::string header;
  GgufTestWriter::Put<uint32_t>(&header, 0x46554747);
  GgufTestWriter::Put<uint32_t>(&header, 3);
  std::string huge_tensors = header;
  GgufTestWriter::Put<uint64_t>(&huge_tensors, ~0ull);
  GgufTestWriter::Put<uint64_t>(&huge_tensors, 0);
  ExpectRejected(huge_tensors, "tensor count");
  std::string huge_kv = header;
  GgufTestWriter::Put<uint64_t>(&huge_kv, 0);
  GgufTestWriter::Put<uint64_t>(&huge_kv, 1ull << 60);
  ExpectRejected(huge_kv, "metadata count");

  GgufTestWriter long_string;
  std::string v;
  GgufTestWriter::Put<uint64_t>(&v, 1ull << 62);
  long_string.Raw("name", GgufValueType::kString, v);
  ExpectRejected(long_string.Build(), "string length");

  GgufTestWriter long_array;
  v.clear();
  GgufTestWriter::Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kInt64));
  GgufTestWriter::Put<uint64_t>(&v, 1ull << 61);
  long_array.Raw("arr", GgufValueType::kArray, v);
  ExpectRejected(long_array.Build(), "'arr': array length");

  GgufTestWriter bad_type;
  bad_type.Raw("weird", static_cast<GgufValueType>(77), "");
  ExpectRejected(bad_type.Build(), "unknown value type 77");

  // Arrays nested beyond the depth limit.
  GgufTestWriter deep;
  v.clear();
  for (int i = 0; i < 20; ++i) {
    GgufTestWriter::Put<uint32_t>(&v, static_cast<uint32_t>(GgufValueType::kArray));
    GgufTestWriter::Put<uint64_t>(&v, 1);
  }
  deep.Raw("deep", GgufValueType::kArray, v);
  ExpectRejected(deep.Build(), "nested deeper");
}

TEST(GgufFileTest, RejectsBadTensorEntries) {
  {
    GgufTestWriter w;
    w.AddTensor("q", static_cast<GgmlType>(10), {256}, std::string(84, '\0'));
    ExpectRejected(w.Build(), "tensor 'q': unsupported tensor type 10");
  }
  {
    GgufTestWriter w;
    w.AddTensor("big", GgmlType::kF32, {1ll << 40, 1ll << 40}, "");
    ExpectRejected(w.Build(), "tensor 'big': dimension 1");
  }
  {
    GgufTestWriter w;
    w.AddTensor("neg", GgmlType::kF32, {-4}, "");
    ExpectRejected(w.Build(), "tensor 'neg': dimension 0 = -4");
  }
  {
    GgufTestWriter w;
    w.AddTensor("five", GgmlType::kF32, {1, 1, 1, 1, 1}, std::string(4, '\0'));
    ExpectRejected(w.Build(), "tensor 'five': 5 dimensions");
  }
  {
    GgufTestWriter w;
    w.AddTensor("short", GgmlType::kF32, {100}, std::string(8, '\0'));
    ExpectRejected(w.Build(), "tensor 'short': data");
  }
  {
    GgufTestWriter w;
    w.AddTensor("rows", GgmlType::kQ8_0, {31}, std::string(34, '\0'));
    ExpectRejected(w.Build(), "tensor 'rows': row length 31");
  }
  {
    GgufTestWriter w;
    w.AddF32Tensor("twice", {1}, {1});
    w.AddF32Tensor("twice", {1}, {2});
    ExpectRejected(w.Build(), "duplicate tensor name 'twice'");
  }
  {
    GgufTestWriter w;
    w.AddU32("k", 1);
    w.AddU32("k", 2);
    ExpectRejected(w.Build(), "duplicate metadata key 'k'");
  }
  {
    GgufTestWriter w;
    w.AddU32("general.alignment", 48);
    ExpectRejected(w.Build(), "general.alignment 48");
  }
}

TEST(GgufFileTest, RejectsMisalignedTensorOffset) {
  GgufTestWriter w;
  w.AddF32Tensor("x", {1}, {1});
  std::string bytes = w.Build();
  // The offset is the last 8 bytes of the tensor entry, right before the header padding.
  const size_t entry_end = 24 + 8 + 1 + 4 + 8 + 4 + 8;
  bytes[entry_end - 8] = 4;
  ExpectRejected(bytes, "tensor 'x': data offset 4 is not a multiple of the alignment 32");
}

TEST(GgufFileTest, OpenMapsAFileAndReportsAMissingOne) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("gguf_file_test_" + std::to_string(getpid()));
  {
    std::ofstream out(path, std::ios::binary);
    const std::string bytes = AllTypesFile(3);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path.string());
  KVSERVE_ASSERT_OK(file);
  EXPECT_EQ(*(*file)->GetString("general.name"), "tiny test");
  std::filesystem::remove(path);
  absl::StatusOr<std::unique_ptr<GgufFile>> missing = GgufFile::Open(path.string());
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound));
}

TEST(GgufFileTest, OpensTheDefaultModel) {
  const std::string path = DefaultModelPath();
  ASSERT_TRUE(std::filesystem::exists(path))
      << path << " is missing: run scripts/setup.sh to fetch the default model";
  absl::StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(path);
  KVSERVE_ASSERT_OK(file);
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.keys().size(), 33u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(*f.GetArrayLength("tokenizer.ggml.tokens"), 49152);
  EXPECT_EQ(*f.GetArrayLength("tokenizer.ggml.merges"), 48900);
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->type, GgmlType::kQ8_0);
  EXPECT_EQ(embd->dims, (std::vector<int64_t>{576, 49152}));
  int counts[31] = {};
  for (const GgufTensorInfo& t : f.tensors()) ++counts[static_cast<int>(t.type)];
  EXPECT_EQ(counts[static_cast<int>(GgmlType::kQ4_1)], 210);
  EXPECT_EQ(counts[static_cast<int>(GgmlType::kF32)], 61);
  EXPECT_EQ(counts[static_cast<int>(GgmlType::kQ8_0)], 1);
}

}  // namespace
}  // namespace kvserve
